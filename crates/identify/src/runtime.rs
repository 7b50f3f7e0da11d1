//! Where the background work of identification runs.

use std::sync::OnceLock;

/// The runtime that runs the verified-bot checks in the background (reverse DNS, IP list
/// refreshes): shared by the process and never dropped, so that a check started from any
/// request, or from a test without a runtime, has somewhere to run, and a policy reload cannot
/// drop it under a running check.
pub(crate) fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("signpost-verify")
            .enable_all()
            .build()
            .map_err(|e| tracing::error!("cannot start the bot verification runtime: {e}"))
            .ok()
    })
    .as_ref()
}
