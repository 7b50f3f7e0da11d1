//! Our handler for `<table>` in htmd: the rows htmd finds, written as a GFM pipe table with
//! each `|` in a cell escaped as `\|` and without htmd's padding.
//!
//! htmd writes a `|` inside a cell as `&#124;`. A reader decodes that reference in text, but not
//! inside a code span, where GFM's own escape is the only one that works: the table is split
//! into cells at every `|` without a `\` before it, and each `\|` becomes `|` before the cell's
//! inline content (code spans included) is read. So ``On`\|`Off`` reads as the code `On|Off`
//! where ``On`&#124;`Off`` read as the literal `&#124;` (the Apache manual writes its directives'
//! syntax that way, `On|Off`, in table cells). Every `|` of a cell takes one `\`, whatever comes
//! before it: a `\` already there (an escaped `\\` in text, or one in code) stays as it was once
//! the reader has taken the one added.
//!
//! htmd pads every cell to its column's width and draws the rule as wide; readers trim cells, so
//! the padding is tokens that say nothing. Rows written here are table rows by construction, so
//! unlike a line pass over the Markdown (tried before: it had to guess which lines were tables)
//! nothing else is touched.
//!
//! Which rows and cells are kept is htmd's choice, made the same way: tables without `<th>` or
//! `<thead>`, and tables inside a cell, go to htmd's handler, which writes their cells as
//! paragraphs. The walk has already made the header row all `<th>` and every other row all
//! `<td>` (`dom::even_out_cells`).

use std::rc::Rc;

use htmd::Element;
use htmd::element_handler::{HandlerResult, Handlers};
use markup5ever_rcdom::{Handle, NodeData};

/// The element's name, if it is one.
fn tag(node: &Handle) -> Option<&str> {
    match &node.data {
        NodeData::Element { name, .. } => Some(&name.local),
        _ => None,
    }
}

/// The element children of `node`.
fn elements(node: &Handle) -> Vec<Handle> {
    node.children
        .borrow()
        .iter()
        .filter(|c| tag(c).is_some())
        .cloned()
        .collect()
}

/// Whether a `<th>` or `<thead>` is in the table, outside tables nested in it (htmd's test for
/// a table it writes as one).
fn has_header_cells(table: &Handle) -> bool {
    let mut stack = elements(table);
    while let Some(node) = stack.pop() {
        match tag(&node) {
            Some("th" | "thead") => return true,
            Some("table") => {}
            _ => stack.extend(elements(&node)),
        }
    }
    false
}

fn in_a_cell(table: &Handle) -> bool {
    let mut parent = parent(table);
    while let Some(node) = parent {
        if matches!(tag(&node), Some("td" | "th")) {
            return true;
        }
        parent = self::parent(&node);
    }
    false
}

fn parent(node: &Handle) -> Option<Handle> {
    let weak = node.parent.take()?;
    let parent = weak.upgrade();
    node.parent.set(Some(weak));
    parent
}

/// The Markdown of each `cell_tag` cell of a row, as one line of cell text.
fn cells(handlers: &dyn Handlers, row: &Handle, cell_tag: &str) -> Vec<String> {
    elements(row)
        .iter()
        .filter(|cell| tag(cell) == Some(cell_tag))
        .filter_map(|cell| handlers.handle(cell))
        .map(|result| cell_text(&result.content))
        .collect()
}

fn is_document_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' ')
}

/// A cell's Markdown on one line: line breaks become spaces (a row is one line) and each `|`
/// becomes `\|` (see the module's comment).
fn cell_text(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    for c in markdown.trim_matches(is_document_whitespace).chars() {
        match c {
            '\n' => out.push(' '),
            '\r' => {}
            '|' => out.push_str("\\|"),
            c => out.push(c),
        }
    }
    out.trim_matches(is_document_whitespace).to_owned()
}

pub(crate) fn table_handler(handlers: &dyn Handlers, element: Element) -> Option<HandlerResult> {
    let table = element.node;
    if !has_header_cells(table) || in_a_cell(table) {
        return handlers.fallback(element);
    }
    let mut captions: Vec<String> = Vec::new();
    let mut header: Vec<String> = Vec::new();
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut has_header = false;
    for section in elements(table) {
        match tag(&section) {
            Some("caption") => {
                if let Some(result) = handlers.handle(&section) {
                    captions.push(
                        result
                            .content
                            .trim_matches(is_document_whitespace)
                            .to_owned(),
                    );
                }
            }
            Some("thead") => {
                // Its first row, or the section itself when it has none.
                let row = elements(&section)
                    .into_iter()
                    .find(|r| tag(r) == Some("tr"))
                    .unwrap_or_else(|| Rc::clone(&section));
                has_header = true;
                header = cells(handlers, &row, "th");
                if header.is_empty() {
                    header = cells(handlers, &row, "td");
                }
            }
            Some("tbody" | "tfoot") => {
                for row in elements(&section).iter().filter(|r| tag(r) == Some("tr")) {
                    if !has_header && header.is_empty() {
                        header = cells(handlers, row, "th");
                        has_header = !header.is_empty();
                        if has_header {
                            continue;
                        }
                    }
                    let row = cells(handlers, row, "td");
                    if !row.is_empty() {
                        rows.push(row);
                    }
                }
            }
            Some("tr") => {
                if !has_header && header.is_empty() {
                    header = cells(handlers, &section, "th");
                    if header.is_empty() {
                        header = cells(handlers, &section, "td");
                    }
                    has_header = !header.is_empty();
                } else {
                    let row = cells(handlers, &section, "td");
                    if !row.is_empty() {
                        rows.push(row);
                    }
                }
            }
            _ => {}
        }
    }
    let columns = rows.iter().map(Vec::len).fold(header.len(), usize::max);
    if columns == 0 {
        let content = handlers.walk_children(table).content;
        let content = content.trim_matches('\n');
        return (!content.is_empty()).then(|| format!("\n\n{content}\n\n").into());
    }
    let mut out = String::from("\n\n");
    // A caption is a paragraph of its own: on the line right before the header row it would
    // be read as a paragraph line, and the table as more of that paragraph.
    for caption in captions.iter().filter(|c| !c.is_empty()) {
        out.push_str(caption);
        out.push_str("\n\n");
    }
    // A table without a header row (its `<th>` cells were all empty) gets an empty one: rows
    // without a header and rule are not a table to a reader, but lines of a paragraph.
    write_row(&mut out, &header, columns);
    out.push('|');
    for _ in 0..columns {
        out.push_str(" --- |");
    }
    out.push('\n');
    for row in &rows {
        write_row(&mut out, row, columns);
    }
    out.push('\n');
    Some(out.into())
}

/// `| a | b |`, with empty cells up to `columns`.
fn write_row(out: &mut String, cells: &[String], columns: usize) {
    out.push('|');
    for i in 0..columns {
        match cells.get(i).map(String::as_str) {
            Some(cell) if !cell.is_empty() => {
                out.push(' ');
                out.push_str(cell);
                out.push_str(" |");
            }
            _ => out.push_str(" |"),
        }
    }
    out.push('\n');
}
