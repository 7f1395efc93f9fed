package harness

import (
	"strings"
	"testing"
)

func TestDoc(t *testing.T) {
	d := Doc{H2("Figures"), Para("see `x<y` and *this*, **that**, `a*b*c`"), &Table{Right: true, Head: []string{"a", "b"}, Rows: [][]string{{"p|q", "1"}}}}
	md := d.Markdown()
	for _, want := range []string{"## Figures\n", "see `x<y`", "| a | b |\n|---|---:|\n| p\\|q | 1 |\n"} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown has no %q:\n%s", want, md)
		}
	}
	h := d.HTML("t")
	for _, want := range []string{"<h2>Figures</h2>", "see <code>x&lt;y</code> and <em>this</em>, <strong>that</strong>, <code>a*b*c</code>", "<td class=r>1</td>"} {
		if !strings.Contains(h, want) {
			t.Fatalf("html has no %q:\n%s", want, h)
		}
	}
	tb := &Table{Head: []string{"name", "n"}, Rows: [][]string{{"ab", "1000"}}}
	if got, want := tb.Text(), "name  n     \nab    1000  \n"; got != want {
		t.Errorf("Text = %q; want %q", got, want)
	}
	tb.Right = true
	if got, want := tb.Text(), "name     n  \nab    1000  \n"; got != want {
		t.Errorf("Text, right-aligned = %q; want %q", got, want)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567"} {
		if got := Thousands(n); got != want {
			t.Errorf("Thousands(%d) = %q; want %q", n, got, want)
		}
	}
}
