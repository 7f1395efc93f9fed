package loadclient_test

import (
	"fmt"

	"github.com/hongbao-io/hongbao/loadclient"
)

// Two processes share 10 users at 4 sends a second. Each knows only its own range; their
// sends interleave into one schedule spaced 250 ms apart.
func ExampleSchedule() {
	const start = int64(1_767_225_600_000_000_000) // 2026-01-01T00:00:00Z, Unix ns
	for _, r := range [][2]uint32{{1, 5}, {6, 10}} {
		s, err := loadclient.NewSchedule(10, r[0], r[1])
		if err != nil {
			panic(err)
		}
		if _, err := s.SetRate(4, start); err != nil {
			panic(err)
		}
		fmt.Printf("users %d-%d:", r[0], r[1])
		for range 4 {
			user, at, _ := s.Next()
			fmt.Printf(" +%dms user %d", (at-start)/1e6, user)
		}
		fmt.Println()
	}
	// Output:
	// users 1-5: +0ms user 1 +250ms user 4 +1000ms user 3 +1750ms user 2
	// users 6-10: +500ms user 7 +750ms user 10 +1250ms user 6 +1500ms user 9
}

func ExampleParsePlan() {
	const start = int64(1_767_225_600_000_000_000)
	plan, err := loadclient.ParsePlan("30000@60s,60000@30s", start)
	if err != nil {
		panic(err)
	}
	for _, c := range plan {
		fmt.Printf("%d QPS from +%ds\n", c.QPS, (c.AtNs-start)/1e9)
	}
	_, err = loadclient.ParsePlan("30000@60s,60000@1m30.5s", start)
	fmt.Println(err)
	// Output:
	// 30000 QPS from +0s
	// 60000 QPS from +60s
	// 0 QPS from +90s
	// cannot parse plan phase 2 "60000@1m30.5s": duration "1m30.5s": want a positive whole number of seconds, so that rate changes fall on whole seconds
}
