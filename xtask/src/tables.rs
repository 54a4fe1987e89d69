//! The book's generated tables: a page marks a table with a comment naming a CSV file of
//! `benchmarks/data/` and the columns to show, and `cargo xtask docs --write` fills in the
//! table below it from the data. `cargo xtask docs` (and so `cargo xtask test`) fails when a
//! page's table differs from what its data gives, so a figure in the book always is the data's.
//!
//! ```text
//! <!-- table: benchmarks/data/workloads.csv
//!      where: run=h100-workloads
//!      columns: allocator=Allocator; w1_ns=W1; held_w1+held_w2+held_w3=Held W1 · W2 · W3 -->
//! | Allocator | W1 | Held W1 · W2 · W3 |
//! | ... generated ... |
//! <!-- end table -->
//! ```
//!
//! `where` (optional) keeps the rows whose column equals the value (several conditions are
//! separated by `;`). A column spec `a+b+c` joins the non-empty cells with ` · `. Columns whose
//! every non-empty cell is a number are right-aligned.

use std::path::Path;

/// A CSV file read whole: the header and the rows, every row as long as the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Csv {
    /// Column names.
    pub(crate) header: Vec<String>,
    /// Cells, row by row.
    pub(crate) rows: Vec<Vec<String>>,
}

/// Splits one CSV line into fields: commas separate, double quotes enclose a field that holds
/// commas, and `""` inside quotes is one quote. A field never spans lines.
fn split_line(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => fields.push(std::mem::take(&mut field)),
            (_, c) => field.push(c),
        }
    }
    if quoted {
        return Err("a quoted field is not closed on its line".to_owned());
    }
    fields.push(field);
    Ok(fields)
}

impl Csv {
    /// Parses `text`; `name` names the file in errors.
    pub(crate) fn parse(name: &str, text: &str) -> Result<Csv, String> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, first) = lines.next().ok_or_else(|| format!("{name}: empty"))?;
        let header = split_line(first).map_err(|e| format!("{name}:1: {e}"))?;
        let mut rows = Vec::new();
        for (i, line) in lines {
            let row = split_line(line).map_err(|e| format!("{name}:{}: {e}", i + 1))?;
            if row.len() != header.len() {
                return Err(format!(
                    "{name}:{}: {} fields where the header has {}",
                    i + 1,
                    row.len(),
                    header.len()
                ));
            }
            rows.push(row);
        }
        Ok(Csv { header, rows })
    }

    /// The index of column `name`.
    fn column(&self, name: &str, file: &str) -> Result<usize, String> {
        self.header.iter().position(|h| h == name).ok_or_else(|| {
            format!(
                "{file} has no column `{name}` (it has {})",
                self.header.join(", ")
            )
        })
    }
}

/// What one table marker asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Spec {
    /// The CSV file, from the repository root.
    file: String,
    /// (column, value) pairs a row must match.
    filter: Vec<(String, String)>,
    /// (columns joined, label).
    columns: Vec<(Vec<String>, String)>,
}

/// Reads a marker's body: `table: FILE`, then optional `where: a=b; c=d`, then `columns: ...`.
fn parse_spec(body: &str) -> Result<Spec, String> {
    let mut file = None;
    let mut filter = Vec::new();
    let mut columns = Vec::new();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (key, value) = line
            .split_once(':')
            .ok_or_else(|| format!("table marker line `{line}` is not `key: value`"))?;
        let pairs = || {
            value
                .split(';')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    p.split_once('=')
                        .map(|(a, b)| (a.trim().to_owned(), b.trim().to_owned()))
                        .ok_or_else(|| format!("`{p}` is not `name=value`"))
                })
        };
        match key.trim() {
            "table" => file = Some(value.trim().to_owned()),
            "where" => filter = pairs().collect::<Result<_, _>>()?,
            "columns" => {
                columns = pairs()
                    .map(|p| p.map(|(c, l)| (c.split('+').map(str::to_owned).collect(), l)))
                    .collect::<Result<_, _>>()?
            }
            other => {
                return Err(format!(
                    "table marker key `{other}` unknown (table, where, columns)"
                ))
            }
        }
    }
    let file = file.ok_or("table marker without `table: FILE`")?;
    if columns.is_empty() {
        return Err(format!("table marker for {file} names no columns"));
    }
    Ok(Spec {
        file,
        filter,
        columns,
    })
}

/// Whether a cell reads as a number (so its column is right-aligned).
fn numeric(cell: &str) -> bool {
    cell.parse::<f64>().is_ok()
}

/// The markdown table a spec gives over `csv`.
fn render(spec: &Spec, csv: &Csv) -> Result<String, String> {
    let filter = spec
        .filter
        .iter()
        .map(|(c, v)| csv.column(c, &spec.file).map(|i| (i, v)))
        .collect::<Result<Vec<_>, _>>()?;
    let columns = spec
        .columns
        .iter()
        .map(|(cs, label)| {
            let idx = cs
                .iter()
                .map(|c| csv.column(c, &spec.file))
                .collect::<Result<Vec<_>, _>>()?;
            Ok((idx, label.as_str()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let rows: Vec<Vec<String>> = csv
        .rows
        .iter()
        .filter(|r| filter.iter().all(|(i, v)| r[*i] == **v))
        .map(|r| {
            columns
                .iter()
                .map(|(idx, _)| {
                    let cells: Vec<&str> = idx
                        .iter()
                        .map(|&i| r[i].as_str())
                        .filter(|c| !c.is_empty())
                        .collect();
                    cells.join(" · ").replace('|', "\\|")
                })
                .collect()
        })
        .collect();
    if rows.is_empty() {
        return Err(format!("{}: no row matches {:?}", spec.file, spec.filter));
    }
    let mut out = String::new();
    let labels: Vec<&str> = columns.iter().map(|(_, l)| *l).collect();
    out.push_str(&format!("| {} |\n", labels.join(" | ")));
    let aligns: Vec<&str> = (0..columns.len())
        .map(|c| {
            let mut cells = rows.iter().map(|r| r[c].as_str()).filter(|s| !s.is_empty());
            if cells.clone().next().is_some() && cells.all(numeric) {
                "---:"
            } else {
                "---"
            }
        })
        .collect();
    out.push_str(&format!("| {} |\n", aligns.join(" | ")));
    for r in rows {
        out.push_str(&format!("| {} |\n", r.join(" | ")));
    }
    Ok(out)
}

/// The marker's opening and closing.
const OPEN: &str = "<!-- table:";
const END: &str = "<!-- end table -->";

/// `page` with every marked table regenerated from the CSV files under `root`; `name` names
/// the page in errors.
pub(crate) fn regenerate(root: &Path, name: &str, page: &str) -> Result<String, String> {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(start) = rest.find(OPEN) {
        let close = rest[start..]
            .find("-->")
            .ok_or_else(|| format!("{name}: a table marker is not closed with `-->`"))?
            + start
            + 3;
        let spec = parse_spec(&rest[start + 5..close - 3]).map_err(|e| format!("{name}: {e}"))?;
        let end = rest[close..]
            .find(END)
            .ok_or_else(|| format!("{name}: table of {} has no `{END}`", spec.file))?
            + close;
        let text = std::fs::read_to_string(root.join(&spec.file))
            .map_err(|e| format!("{name}: cannot read {}: {e}", spec.file))?;
        let csv = Csv::parse(&spec.file, &text)?;
        out.push_str(&rest[..close]);
        out.push('\n');
        out.push_str(&render(&spec, &csv).map_err(|e| format!("{name}: {e}"))?);
        rest = &rest[end..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_keep_quoted_commas_and_rows_must_match_the_header() {
        let csv = Csv::parse("t.csv", "a,b\n1,\"x, \"\"y\"\"\"\n").unwrap();
        assert_eq!(csv.rows, vec![vec!["1".to_owned(), "x, \"y\"".to_owned()]]);
        let e = Csv::parse("t.csv", "a,b\n1,2,3\n").unwrap_err();
        assert!(e.contains("t.csv:2: 3 fields"), "{e}");
        assert!(Csv::parse("t.csv", "a\n\"open\n").is_err());
    }

    #[test]
    fn a_marker_is_filled_from_its_rows_and_joined_columns() {
        let dir = std::env::temp_dir().join(format!("emm-xtask-tables-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("d.csv"),
            "run,name,x,y\nr1,pool,1.5,2\nr2,other,3,\nr1,cuda,10,\n",
        )
        .unwrap();
        let page = "intro\n<!-- table: d.csv\n where: run=r1\n columns: name=Name; x+y=X · Y -->\nstale\n<!-- end table -->\nafter\n";
        let got = regenerate(&dir, "p.md", page).unwrap();
        let want = "intro\n<!-- table: d.csv\n where: run=r1\n columns: name=Name; x+y=X · Y -->\n\
                    | Name | X · Y |\n| --- | --- |\n| pool | 1.5 · 2 |\n| cuda | 10 |\n<!-- end table -->\nafter\n";
        assert_eq!(got, want);
        // Regenerating is a fixed point: a page that is up to date stays the same.
        assert_eq!(regenerate(&dir, "p.md", &got).unwrap(), got);
        let bad = page.replace("name=Name", "nope=Name");
        assert!(regenerate(&dir, "p.md", &bad)
            .unwrap_err()
            .contains("no column `nope`"));
        let unclosed = page.replace("<!-- end table -->", "");
        assert!(regenerate(&dir, "p.md", &unclosed)
            .unwrap_err()
            .contains("has no"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn numeric_columns_are_right_aligned() {
        let csv = Csv::parse("t.csv", "n,v\na,1\nb,2.5\n").unwrap();
        let spec = parse_spec("table: t.csv\ncolumns: n=N; v=V").unwrap();
        assert_eq!(
            render(&spec, &csv).unwrap(),
            "| N | V |\n| --- | ---: |\n| a | 1 |\n| b | 2.5 |\n"
        );
    }
}
