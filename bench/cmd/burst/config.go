package main

import (
	"fmt"
	"time"
)

// plan is what every replica schedules.
type plan struct {
	workload string // workloadBurst or workloadSpread
	jobs     int
	period   int // seconds
}

func (p plan) validate() error {
	switch {
	case p.workload != workloadBurst && p.workload != workloadSpread:
		return fmt.Errorf("-workload %q: give burst, spread or rate", p.workload)
	case p.jobs < 1:
		return fmt.Errorf("-jobs %d: give at least 1", p.jobs)
	case p.period < 1 || 60%p.period != 0:
		return fmt.Errorf("-period %d: give a divisor of 60 (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30 or 60), so that */period ticks every period", p.period)
	}
	return nil
}

// spec is job i's spec.
func (p plan) spec(i int) string {
	if p.workload == workloadSpread {
		return fmt.Sprintf("%d/%d * * * * *", i%p.period, p.period)
	}
	return fmt.Sprintf("*/%d * * * * *", p.period)
}

// step is the time between two instants at which jobs are due.
func (p plan) step() time.Duration {
	if p.workload == workloadSpread {
		return time.Second
	}
	return time.Duration(p.period) * time.Second
}

// instantsPerPeriod is how many instants a period has.
func (p plan) instantsPerPeriod() int { return int(time.Duration(p.period) * time.Second / p.step()) }

// config is one run's settings (for -workload rate, the settings its trials share).
type config struct {
	workload  string
	jobs      int
	replicas  int
	nodes     int
	period    int
	skip      int           // instants skipped after every replica started
	instants  int           // instants measured
	grace     time.Duration // after the last instant measured
	callgrind bool
	logs      string // a directory to copy the replicas' stderr to, if set
}

func (c config) plan() plan { return plan{workload: c.workload, jobs: c.jobs, period: c.period} }

// withDefaults fills in the settings left at zero that depend on the workload: one period's
// instants skipped, three periods' measured, a grace of one period.
func (c config) withDefaults() config {
	p := c.plan()
	if p.validate() != nil {
		return c
	}
	if c.skip == 0 {
		c.skip = p.instantsPerPeriod()
	}
	if c.instants == 0 {
		c.instants = 3 * p.instantsPerPeriod()
	}
	if c.grace == 0 {
		c.grace = time.Duration(c.period) * time.Second
	}
	return c
}

func (c config) validate() error {
	if err := c.plan().validate(); err != nil {
		return err
	}
	switch {
	case c.replicas < 1:
		return fmt.Errorf("-replicas %d: give at least 1", c.replicas)
	case c.nodes < 1 || c.nodes%2 == 0:
		return fmt.Errorf("-nodes %d: give an odd number of nodes (redlock.New refuses an even count without an option)", c.nodes)
	case c.skip < 1:
		return fmt.Errorf("-skip %d: give at least 1 (the costs are measured from half a step before the first instant measured, which must come after every replica started)", c.skip)
	case c.instants < 1:
		return fmt.Errorf("-instants %d: give at least 1", c.instants)
	case c.grace <= 0:
		return fmt.Errorf("-grace %v: give a positive duration", c.grace)
	}
	return nil
}

// window is the measured part of a run, from the moment every replica is ready.
type window struct {
	instants []time.Time // the instants measured
	// from and to bound the costs' measurement: as many steps as instants measured, from half
	// a step before the first, so that in a steady state the work done in it is the work of
	// the instants measured.
	from, to time.Time
	end      time.Time // the last instant plus the grace: the replicas are stopped then
}

func (c config) window(ready time.Time) window {
	step := c.plan().step()
	first := time.Unix(0, (ready.UnixNano()/int64(step)+1+int64(c.skip))*int64(step))
	w := window{from: first.Add(-step / 2)}
	for i := range c.instants {
		w.instants = append(w.instants, first.Add(time.Duration(i)*step))
	}
	w.to = w.from.Add(time.Duration(c.instants) * step)
	w.end = w.instants[len(w.instants)-1].Add(c.grace)
	return w
}
