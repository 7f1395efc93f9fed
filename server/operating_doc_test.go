package server_test

import (
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hongbao-io/hongbao/server"
)

// TestOperatingFlagTable: docs/OPERATING.md's flag table lists exactly the
// flags of the server's -help, each once.
func TestOperatingFlagTable(t *testing.T) {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Bool("version", false, "") // cmd/server's own
	if _, err := server.ParseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	var help []string
	fs.VisitAll(func(f *flag.Flag) { help = append(help, f.Name) })
	doc, err := os.ReadFile("../docs/OPERATING.md")
	if err != nil {
		t.Fatal(err)
	}
	var table []string
	name := regexp.MustCompile("`-([a-z-]+)`")
	for _, line := range strings.Split(string(doc), "\n") {
		if cells := strings.Split(line, "|"); len(cells) > 2 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`-") {
			for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
				table = append(table, m[1])
			}
		}
	}
	slices.Sort(help)
	sorted := slices.Sorted(slices.Values(table))
	if !slices.Equal(sorted, help) {
		t.Errorf("docs/OPERATING.md's flag table lists %q;\n-help lists %q", sorted, help)
	}
	if c := slices.Compact(slices.Clone(sorted)); len(c) != len(sorted) {
		t.Errorf("a flag is in the table twice: %q", sorted)
	}
}
