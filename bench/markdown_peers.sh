#!/usr/bin/env bash
# signpost's Markdown against html2text, markdownify and pandoc on Debian's documentation
# packages: median cl100k_base tokens per page, and the share of content words and of links to
# other pages each converter keeps (definitions in bench/markdown_peers.py).
#
#   apt-get install -y git-doc apache2-doc python3.11-doc pandoc
#   pip install html2text markdownify beautifulsoup4 lxml lxml_html_clean trafilatura markdown-it-py
#   bench/markdown_peers.sh [out dir]
#
# A corpus whose package is missing is named on stderr and left out.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
cargo build --release -p signpost-markdown --example convert_files --example count_tokens
bin=${CARGO_TARGET_DIR:-target}/release/examples
python3 bench/markdown_peers.py "$bin/convert_files" "$bin/count_tokens" "$out" \
    "apache2-doc=/usr/share/doc/apache2-doc/manual/en=https://httpd.apache.org/docs/2.4/" \
    "python3.11-doc=/usr/share/doc/python3.11/html=https://docs.python.org/3.11/" \
    "git-doc=/usr/share/doc/git-doc=https://git-scm.com/docs/"
echo "outputs in $out" >&2
