package web

import (
	"fmt"
	"slices"
	"time"
)

// The chart of a job's runs' durations: one bar per run, oldest on the left, as tall as the
// run was long against the longest, coloured by outcome (the class names the outcome).
const (
	chartWidth  = 720
	chartHeight = 160
	chartGap    = 1
)

type chart struct {
	Width, Height int
	Bars          []bar
	Longest       string // the longest run's duration, the height of the chart
}

type bar struct {
	X, Y, W, H float64
	Outcome    string
	Title      string // the tooltip: start, outcome, duration
}

// durationChart draws runs (newest first, as History returns them).
func durationChart(runs []pageRun) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	if len(runs) == 0 {
		return c
	}
	var longest time.Duration
	for _, r := range runs {
		longest = max(longest, r.Duration)
	}
	c.Longest = longest.Round(time.Millisecond).String()
	w := float64(chartWidth) / float64(len(runs))
	for i, r := range slices.Backward(runs) {
		h := 1.0 // a run too short to see still gets a mark
		if longest > 0 {
			h = max(h, float64(chartHeight)*float64(r.Duration)/float64(longest))
		}
		c.Bars = append(c.Bars, bar{X: float64(len(runs)-1-i) * w, Y: chartHeight - h, W: max(w-chartGap, 1), H: h, Outcome: r.Outcome,
			Title: fmt.Sprintf("%s: %s, %s", r.Start.UTC().Format("2006-01-02 15:04:05 MST"), r.Outcome, r.Duration.Round(time.Millisecond))})
	}
	return c
}
