package harness

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// HistoryCheck is what the load client's history of money answers
// (loadclient -history) says, checked as Jepsen checks an idempotence
// workload: every request answered with money the same every time it was
// answered, and every shake envelope told to one request only.
type HistoryCheck struct {
	Answers   int    `json:"answers"`   // money answers in the history
	Requests  int    `json:"requests"`  // distinct requests among them
	Repeated  int    `json:"repeated"`  // answers to a request answered before: each the same?
	Amount    int64  `json:"amount"`    // fen told, each request counted once
	Conflicts int    `json:"conflicts"` // requests answered with different money
	Shared    int    `json:"shared"`    // shake envelopes told to more than one request
	First     string `json:"first_bad"` // the first conflict or shared envelope, as lines of the history
}

// OK says whether the history holds.
func (h HistoryCheck) OK() bool { return h.Conflicts == 0 && h.Shared == 0 }

func (h HistoryCheck) String() string {
	s := fmt.Sprintf("%d money answers to %d requests (%d answered again), %d fen told; requests answered with different money: %d; shake envelopes told to two requests: %d",
		h.Answers, h.Requests, h.Repeated, h.Amount, h.Conflicts, h.Shared)
	if h.First != "" {
		s += "; first: " + h.First
	}
	return s
}

// CheckHistory reads and checks the history file at path.
func CheckHistory(path string) (HistoryCheck, error) {
	var h HistoryCheck
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	defer f.Close()
	type answer struct {
		env    uint64
		amount uint32
		line   string
	}
	byReq := map[string]answer{} // user,kind,request → its first answer
	byEnv := map[uint64]string{} // shake envelope → its request
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); n++ {
		line := sc.Text()
		if n == 0 {
			continue // the header
		}
		fs := strings.Split(line, ",")
		if len(fs) != 6 {
			return h, fmt.Errorf("%s: line %d: %q", path, n+1, line)
		}
		env, err1 := strconv.ParseUint(fs[4], 10, 64)
		amount, err2 := strconv.ParseUint(fs[5], 10, 32)
		if err1 != nil || err2 != nil {
			return h, fmt.Errorf("%s: line %d: %q", path, n+1, line)
		}
		h.Answers++
		key := fs[0] + "," + fs[1] + "," + fs[2]
		a := answer{env: env, amount: uint32(amount), line: line}
		if first, ok := byReq[key]; ok {
			h.Repeated++
			if first.env != a.env || first.amount != a.amount {
				h.Conflicts++
				if h.First == "" {
					h.First = first.line + " then " + line
				}
			}
			continue
		}
		byReq[key] = a
		h.Amount += int64(amount)
		if fs[1] == "shake" {
			if other, ok := byEnv[env]; ok {
				h.Shared++
				if h.First == "" {
					h.First = "envelope " + fs[4] + " told to " + other + " and " + key
				}
				continue
			}
			byEnv[env] = key
		}
	}
	h.Requests = len(byReq)
	return h, sc.Err()
}
