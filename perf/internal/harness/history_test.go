package harness

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hongbao-io/hongbao/loadclient"
)

// TestCheckHistory: a clean history holds, repeated answers counted once;
// a request answered with different money, or an envelope told to two
// requests, is found and named.
func TestCheckHistory(t *testing.T) {
	check := func(lines string) HistoryCheck {
		t.Helper()
		path := filepath.Join(t.TempDir(), "history.csv")
		if err := os.WriteFile(path, []byte(loadclient.HistoryHeader+lines), 0o644); err != nil {
			t.Fatal(err)
		}
		h, err := CheckHistory(path)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	clean := "1,shake,77,1,900,5\n1,shake,77,1,900,5\n2,shake,78,1,901,7\n2,open,500,0,500,3\n3,open,500,1,500,4\n2,open,500,1,500,3\n"
	if h := check(clean); !h.OK() || h.Answers != 6 || h.Requests != 4 || h.Repeated != 2 || h.Amount != 19 {
		t.Fatalf("clean history: %+v", h)
	}
	if h := check("1,shake,77,1,900,5\n1,shake,77,1,902,5\n"); h.Conflicts != 1 || h.OK() || h.First == "" {
		t.Fatalf("a request answered twice differently: %+v", h)
	}
	if h := check("1,shake,77,1,900,5\n2,shake,78,1,900,5\n"); h.Shared != 1 || h.OK() {
		t.Fatalf("an envelope told to two requests: %+v", h)
	}
	if h := check("2,open,500,0,500,3\n2,open,500,1,500,4\n"); h.Conflicts != 1 {
		t.Fatalf("a share told twice with different amounts: %+v", h)
	}
}
