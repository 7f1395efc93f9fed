package main

import (
	"fmt"
	"html"
	"regexp"
	"strings"
)

// doc is a report as a list of blocks that render to Markdown and to HTML
// alike, so report.md and report.html cannot say different things.
type doc []block

type block interface{ isBlock() }

type (
	heading struct {
		level int
		text  string
	}
	para  struct{ text string } // `code` spans allowed
	table struct {
		head  []string
		rows  [][]string
		right bool // numbers: right-align every column but the first
	}
	image struct{ src, alt, caption string }
	code  struct{ text string }
	links []struct{ href, text, note string }
)

func (heading) isBlock() {}
func (para) isBlock()    {}
func (table) isBlock()   {}
func (image) isBlock()   {}
func (code) isBlock()    {}
func (links) isBlock()   {}

// markdown renders d as GitHub-flavoured Markdown.
func (d doc) markdown() string {
	var b strings.Builder
	for _, bl := range d {
		switch x := bl.(type) {
		case heading:
			fmt.Fprintf(&b, "%s %s\n\n", strings.Repeat("#", x.level), x.text)
		case para:
			fmt.Fprintf(&b, "%s\n\n", x.text)
		case table:
			cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
			row := func(cells []string) {
				b.WriteString("|")
				for _, c := range cells {
					fmt.Fprintf(&b, " %s |", cell(c))
				}
				b.WriteString("\n")
			}
			row(x.head)
			b.WriteString("|")
			for i := range x.head {
				if x.right && i > 0 {
					b.WriteString("---:|")
				} else {
					b.WriteString("---|")
				}
			}
			b.WriteString("\n")
			for _, r := range x.rows {
				row(r)
			}
			b.WriteString("\n")
		case image:
			fmt.Fprintf(&b, "![%s](%s)\n\n", x.alt, x.src)
			if x.caption != "" {
				fmt.Fprintf(&b, "*%s*\n\n", x.caption)
			}
		case code:
			fmt.Fprintf(&b, "```sh\n%s\n```\n\n", strings.TrimRight(x.text, "\n"))
		case links:
			for _, l := range x {
				fmt.Fprintf(&b, "- [%s](%s)", l.text, l.href)
				if l.note != "" {
					fmt.Fprintf(&b, ": %s", l.note)
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

// html renders d as one self-contained page (images are files beside it).
func (d doc) html(title string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>\n<style>%s</style></head><body>\n", html.EscapeString(title), htmlStyle)
	for _, bl := range d {
		switch x := bl.(type) {
		case heading:
			fmt.Fprintf(&b, "<h%d>%s</h%d>\n", x.level, inline(x.text), x.level)
		case para:
			fmt.Fprintf(&b, "<p>%s</p>\n", inline(x.text))
		case table:
			b.WriteString("<table><tr>")
			for _, h := range x.head {
				fmt.Fprintf(&b, "<th>%s</th>", inline(h))
			}
			b.WriteString("</tr>\n")
			for _, r := range x.rows {
				b.WriteString("<tr>")
				for i, c := range r {
					if x.right && i > 0 {
						fmt.Fprintf(&b, "<td class=r>%s</td>", inline(c))
					} else {
						fmt.Fprintf(&b, "<td>%s</td>", inline(c))
					}
				}
				b.WriteString("</tr>\n")
			}
			b.WriteString("</table>\n")
		case image:
			fmt.Fprintf(&b, "<figure><img src=\"%s\" alt=\"%s\"><figcaption>%s</figcaption></figure>\n",
				html.EscapeString(x.src), html.EscapeString(x.alt), inline(x.caption))
		case code:
			fmt.Fprintf(&b, "<pre><code>%s</code></pre>\n", html.EscapeString(strings.TrimRight(x.text, "\n")))
		case links:
			b.WriteString("<ul>\n")
			for _, l := range x {
				fmt.Fprintf(&b, "<li><a href=\"%s\">%s</a>", html.EscapeString(l.href), inline(l.text))
				if l.note != "" {
					fmt.Fprintf(&b, ": %s", inline(l.note))
				}
				b.WriteString("</li>\n")
			}
			b.WriteString("</ul>\n")
		}
	}
	b.WriteString("</body></html>\n")
	return b.String()
}
