package loadclient_test

import (
	"fmt"

	"github.com/hongbao-io/hongbao/loadclient"
)

func ExampleLatencyHistogram() {
	h := new(loadclient.LatencyHistogram) // 28 KiB: one per event loop
	for v := int64(1); v <= 1000; v++ {
		h.Record(v * 10_000) // 10 µs .. 10 ms, measured from the scheduled send time
	}
	fmt.Println(h.Count(), h.Min(), h.Max(), h.Mean())
	fmt.Println(h.Quantile(0.5), h.Quantile(0.99), h.Quantile(1))

	var total loadclient.LatencyHistogram // a reporter merges the loops' histograms
	total.Merge(h)
	fmt.Println(total.Count() == h.Count())
	// Output:
	// 1000 10000 10000000 5.005e+06
	// 4997120 9928704 10000000
	// true
}
