#!/usr/bin/env python3
"""signpost's Markdown against other HTML-to-Markdown converters, per corpus of real pages.

Driven by bench/markdown_peers.sh, which builds the two example binaries this reads
(convert_files, count_tokens) and passes their paths. For each corpus and each converter:

- tokens: cl100k_base tokens of each page's output (counted by tiktoken-rs, which ships the
  encoding); the table gives the median page.
- content words kept: the page's content words are the words (runs of letters, digits and `_`,
  lowercased) of the text BeautifulSoup (lxml) gets from the page's <body> with <script>,
  <style>, <noscript> and <template> removed, counted with repeats. The output's words are
  counted the same way on the text of the output rendered as HTML by markdown-it-py
  (CommonMark with tables), so link targets and Markdown syntax are not words. Kept = for
  each word, the fewer of its counts in page and output, summed over words and pages, over the
  page's words summed over pages.
- links kept: the page's links are the distinct targets of its <a href> in that same body,
  resolved against the page's URL (and <base href>), without their fragment, http(s) only,
  the page itself left out ("links to other pages"). The output's are the <a href> of its
  rendering, resolved against the page's URL the same way. Kept = the page's links found in
  the output, summed over pages, over the page's links summed over pages.
- the same two shares for the main text: what trafilatura (a main-content extractor,
  include_links, include_tables) takes from the page as its content, words and link targets
  counted as above. The whole-body figures count a site's menus, breadcrumbs and language bars
  as content; the main-text ones count what a neutral extractor sees as the page's content.

Converters, each with its defaults but for the output format: signpost (root-relative
same-site links as the edge sends them, and absolute), html2text (baseurl set to the page's URL),
markdownify, pandoc (-f html -t gfm).
"""

import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

import html2text
import markdownify
import trafilatura
from bs4 import BeautifulSoup
from markdown_it import MarkdownIt

WORD = re.compile(r"\w+", re.UNICODE)
RENDER = MarkdownIt("commonmark").enable("table")


def words(text):
    return collections.Counter(w.lower() for w in WORD.findall(text))


def resolve(base, href):
    href = (href or "").strip()
    if not href:
        return None
    try:
        url = urllib.parse.urljoin(base, href)
    except ValueError:
        return None
    url, _ = urllib.parse.urldefrag(url)
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return None
    return url


def page_reference(html, page_url):
    """The whole-body words and links of a page (see the module's comment)."""
    soup = BeautifulSoup(html, "lxml")
    base = page_url
    base_tag = soup.find("base", href=True)
    if base_tag:
        base = urllib.parse.urljoin(page_url, base_tag["href"])
    body = soup.body or soup
    for tag in body.find_all(["script", "style", "noscript", "template"]):
        tag.decompose()
    links = set()
    for a in body.find_all("a", href=True):
        url = resolve(base, a["href"])
        if url and url != page_url:
            links.add(url)
    return words(body.get_text(" ")), links


def main_reference(html, page_url):
    """Words and links of the page's main text as trafilatura extracts it."""
    xml = trafilatura.extract(
        html,
        # Without the page's URL: given one, trafilatura resolves relative targets against
        # the site's root rather than the page.
        output_format="xml",
        include_links=True,
        include_tables=True,
        include_comments=False,
        include_formatting=True,
    )
    if not xml:
        return collections.Counter(), set()
    soup = BeautifulSoup(xml, "lxml-xml")
    links = set()
    for ref in soup.find_all("ref"):
        url = resolve(page_url, ref.get("target"))
        if url and url != page_url:
            links.add(url)
    return words(soup.get_text(" ")), links


def output_words_links(markdown, page_url):
    soup = BeautifulSoup(RENDER.render(markdown), "lxml")
    links = set()
    for a in soup.find_all("a", href=True):
        url = resolve(page_url, a["href"])
        if url:
            links.add(url)
    return words(soup.get_text(" ")), links


def peers(html, page_url):
    converter = html2text.HTML2Text(baseurl=page_url)
    yield "html2text", converter.handle(html)
    yield "markdownify", markdownify.markdownify(html)
    pandoc = subprocess.run(
        ["pandoc", "-f", "html", "-t", "gfm"],
        input=html.encode(),
        capture_output=True,
        check=False,
    )
    yield "pandoc", pandoc.stdout.decode("utf-8", "replace")


def main():
    convert_files, count_tokens, out_root = sys.argv[1:4]
    corpora = [tuple(c.split("=", 2)) for c in sys.argv[4:]]
    rows = []
    for name, root, site in corpora:
        files = sorted(
            os.path.join(d, f)
            for d, _, fs in os.walk(root)
            for f in fs
            if f.endswith(".html")
        )
        if not files:
            print(f"{name}: no pages under {root}", file=sys.stderr)
            continue
        started = time.time()
        outputs = collections.defaultdict(dict)  # converter -> page -> output path
        for form, label in [("root-relative", "signpost"), ("absolute", "signpost (absolute links)")]:
            out = os.path.join(out_root, name, label.replace(" ", "_").strip("()"))
            subprocess.run(
                [convert_files, "--links", form, root, site, out, *files], check=True
            )
            for f in files:
                outputs[label][f] = os.path.join(out, os.path.relpath(f, root) + ".md")
        totals = collections.defaultdict(lambda: [0, 0, 0, 0, 0, 0, 0, 0])
        for f in files:
            with open(f, "rb") as handle:
                raw = handle.read()
            html = raw.decode("utf-8", "replace")
            page_url = urllib.parse.urljoin(site, os.path.relpath(f, root))
            body_words, body_links = page_reference(html, page_url)
            main_words, main_links = main_reference(html, page_url)
            for peer, markdown in peers(html, page_url):
                path = os.path.join(out_root, name, peer, os.path.relpath(f, root) + ".md")
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(markdown)
                outputs[peer][f] = path
            for converter, pages in outputs.items():
                with open(pages[f], encoding="utf-8") as handle:
                    markdown = handle.read()
                got_words, got_links = output_words_links(markdown, page_url)
                t = totals[converter]
                for i, (want_words, want_links) in enumerate(
                    [(body_words, body_links), (main_words, main_links)]
                ):
                    t[4 * i + 0] += sum((want_words & got_words).values())
                    t[4 * i + 1] += sum(want_words.values())
                    t[4 * i + 2] += len(want_links & got_links)
                    t[4 * i + 3] += len(want_links)
        paths = [p for pages in outputs.values() for p in pages.values()]
        counted = subprocess.run(
            [count_tokens], input="\n".join(paths).encode(), capture_output=True, check=True
        ).stdout.decode()
        tokens = {}
        for line in counted.splitlines():
            count, path = line.split("\t", 1)
            tokens[path] = int(count)
        for converter, pages in outputs.items():
            t = totals[converter]
            share = lambda kept, total: 100.0 * kept / total if total else float("nan")
            rows.append(
                (
                    name,
                    len(files),
                    converter,
                    statistics.median(tokens[p] for p in pages.values()),
                    share(t[0], t[1]),
                    share(t[2], t[3]),
                    share(t[4], t[5]),
                    share(t[6], t[7]),
                )
            )
        print(f"{name}: {len(files)} pages in {time.time() - started:.0f} s", file=sys.stderr)
    print(
        "| corpus | pages | converter | median tokens | words kept (body) | links kept (body) "
        "| words kept (main text) | links kept (main text) |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for name, pages, converter, median, bw, bl, mw, ml in rows:
        print(
            f"| {name} | {pages} | {converter} | {median:,.0f} | {bw:.1f}% | {bl:.1f}% "
            f"| {mw:.1f}% | {ml:.1f}% |"
        )


if __name__ == "__main__":
    main()
