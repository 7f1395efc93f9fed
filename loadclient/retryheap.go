package loadclient

// The reconnects waiting out their backoff, soonest first.

// retryAt is a reconnect due at a time; retryHeap is a min-heap of them by time (hand-made:
// container/heap would box every entry).
type retryAt struct {
	at  int64
	idx uint32
}

type retryHeap []retryAt

func (h *retryHeap) push(r retryAt) {
	*h = append(*h, r)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *retryHeap) pop() retryAt {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	for i := 0; ; {
		m, l, r := i, 2*i+1, 2*i+2
		if l < len(s) && s[l].at < s[m].at {
			m = l
		}
		if r < len(s) && s[r].at < s[m].at {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	*h = s
	return top
}
