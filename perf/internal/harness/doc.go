package harness

import (
	"fmt"
	"html"
	"regexp"
	"strings"
)

// Doc is a report as a list of blocks that render to Markdown and to HTML
// alike, so a run's report.md and report.html cannot say different things.
type Doc []Block

// Block is one of H1, H2, H3, Para, *Table, Image, Code, Links.
type Block interface{ isBlock() }

type (
	// H1, H2 and H3 are headings.
	H1 string
	H2 string
	H3 string
	// Para is a paragraph; `code`, **strong** and *emphasis* spans allowed.
	Para string
	// Table is a table; Right right-aligns every column but the first.
	Table struct {
		Head  []string
		Rows  [][]string
		Right bool
	}
	// Image is a picture beside the report.
	Image struct{ Src, Alt, Caption string }
	// Code is a block of shell commands.
	Code string
	// Links is a list of links.
	Links []Link
	// Link is one entry of Links.
	Link struct{ Href, Text, Note string }
)

func (H1) isBlock()     {}
func (H2) isBlock()     {}
func (H3) isBlock()     {}
func (Para) isBlock()   {}
func (*Table) isBlock() {}
func (Image) isBlock()  {}
func (Code) isBlock()   {}
func (Links) isBlock()  {}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Markdown renders t as a GitHub-flavoured Markdown table.
func (t *Table) Markdown() string {
	var b strings.Builder
	row := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			fmt.Fprintf(&b, " %s |", strings.ReplaceAll(c, "|", `\|`))
		}
		b.WriteString("\n")
	}
	row(t.Head)
	b.WriteString("|")
	for i := range t.Head {
		if t.Right && i > 0 {
			b.WriteString("---:|")
		} else {
			b.WriteString("---|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		row(r)
	}
	return b.String()
}

// Text renders t for a terminal: columns padded to their widest cell.
func (t *Table) Text() string {
	all := append([][]string{t.Head}, t.Rows...)
	w := make([]int, len(t.Head))
	for _, r := range all {
		for i, c := range r {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, r := range all {
		for i, c := range r {
			pad := strings.Repeat(" ", w[i]-len([]rune(c)))
			if t.Right && i > 0 {
				b.WriteString(pad + c + "  ")
			} else {
				b.WriteString(c + pad + "  ")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// heading is the level and text of an H1, H2 or H3.
func heading(b Block) (int, string) {
	switch h := b.(type) {
	case H1:
		return 1, string(h)
	case H2:
		return 2, string(h)
	}
	return 3, string(b.(H3))
}

// Markdown renders d as GitHub-flavoured Markdown.
func (d Doc) Markdown() string {
	var b strings.Builder
	for _, bl := range d {
		switch x := bl.(type) {
		case H1, H2, H3:
			level, text := heading(x)
			fmt.Fprintf(&b, "%s %s\n\n", strings.Repeat("#", level), text)
		case Para:
			fmt.Fprintf(&b, "%s\n\n", x)
		case *Table:
			b.WriteString(x.Markdown() + "\n")
		case Image:
			fmt.Fprintf(&b, "![%s](%s)\n\n", x.Alt, x.Src)
			if x.Caption != "" {
				fmt.Fprintf(&b, "*%s*\n\n", x.Caption)
			}
		case Code:
			fmt.Fprintf(&b, "```sh\n%s\n```\n\n", strings.TrimRight(string(x), "\n"))
		case Links:
			for _, l := range x {
				fmt.Fprintf(&b, "- [%s](%s)", l.Text, l.Href)
				if l.Note != "" {
					fmt.Fprintf(&b, ": %s", l.Note)
				}
				b.WriteString("\n")
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

var (
	strong = regexp.MustCompile(`\*\*([^*]+)\*\*`)
	em     = regexp.MustCompile(`\*([^*\s][^*]*)\*`)
)

// inline escapes s for HTML and renders its Markdown spans: `code`,
// **strong** and *emphasis* (not inside code).
func inline(s string) string {
	parts := strings.Split(s, "`")
	for i, p := range parts {
		p = html.EscapeString(p)
		if i%2 == 1 {
			p = "<code>" + p + "</code>"
		} else {
			p = strong.ReplaceAllString(p, "<strong>$1</strong>")
			p = em.ReplaceAllString(p, "<em>$1</em>")
		}
		parts[i] = p
	}
	return strings.Join(parts, "")
}

const htmlStyle = `body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9rem}th,td{border:1px solid #ccc;padding:.25rem .5rem}
th{background:#f3f3f3}td.r{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f6f8fa;padding:.75rem;overflow-x:auto;font-size:.85rem}code{font-size:.9em}
img{max-width:100%;border:1px solid #ddd}figure{margin:1rem 0 2rem}figcaption{font-size:.9rem;color:#555}`

// HTML renders d as one self-contained page (images are files beside it).
func (d Doc) HTML(title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>\n<style>%s</style></head><body>\n", html.EscapeString(title), htmlStyle)
	for _, bl := range d {
		switch x := bl.(type) {
		case H1, H2, H3:
			level, text := heading(x)
			fmt.Fprintf(&b, "<h%d>%s</h%d>\n", level, inline(text), level)
		case Para:
			fmt.Fprintf(&b, "<p>%s</p>\n", inline(string(x)))
		case *Table:
			b.WriteString("<table><tr>")
			for _, h := range x.Head {
				fmt.Fprintf(&b, "<th>%s</th>", inline(h))
			}
			b.WriteString("</tr>\n")
			for _, r := range x.Rows {
				b.WriteString("<tr>")
				for i, c := range r {
					if x.Right && i > 0 {
						fmt.Fprintf(&b, "<td class=r>%s</td>", inline(c))
					} else {
						fmt.Fprintf(&b, "<td>%s</td>", inline(c))
					}
				}
				b.WriteString("</tr>\n")
			}
			b.WriteString("</table>\n")
		case Image:
			fmt.Fprintf(&b, "<figure><img src=\"%s\" alt=\"%s\"><figcaption>%s</figcaption></figure>\n",
				html.EscapeString(x.Src), html.EscapeString(x.Alt), inline(x.Caption))
		case Code:
			fmt.Fprintf(&b, "<pre><code>%s</code></pre>\n", html.EscapeString(strings.TrimRight(string(x), "\n")))
		case Links:
			b.WriteString("<ul>\n")
			for _, l := range x {
				fmt.Fprintf(&b, "<li><a href=\"%s\">%s</a>", html.EscapeString(l.Href), inline(l.Text))
				if l.Note != "" {
					fmt.Fprintf(&b, ": %s", inline(l.Note))
				}
				b.WriteString("</li>\n")
			}
			b.WriteString("</ul>\n")
		}
	}
	b.WriteString("</body></html>\n")
	return b.String()
}

// TextPage is a plain-text report as a page of its own.
func TextPage(title, text string) string {
	return Doc{H1(title), Code(text)}.HTML(title)
}
