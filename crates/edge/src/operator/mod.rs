//! What the operator runs and reads: the admin listener, the commands that do not serve
//! (check, render, codes, tokens, test), and `signpost trace`.

pub(crate) mod admin;
pub(crate) mod commands;
pub(crate) mod exposition;
pub(crate) mod process;
pub(crate) mod trace;
