package jitter

import (
	"testing"
	"time"
)

// Each wait lies in [0, step], the steps double up to max, and Reset starts them again.
// (Pure logic: no fake needed beyond drawing many waits.)
func TestExponential(t *testing.T) {
	b := Exponential(10*time.Millisecond, 40*time.Millisecond)
	steps := []time.Duration{10, 20, 40, 40}
	for round := range 2 {
		for i, step := range steps {
			step *= time.Millisecond
			least, most := step, time.Duration(0)
			for range 200 {
				c := Exponential(10*time.Millisecond, 40*time.Millisecond)
				for range i {
					c.NextBackOff()
				}
				d := c.NextBackOff()
				if d < 0 || d > step {
					t.Fatalf("wait %d: %v outside [0, %v]", i, d, step)
				}
				least, most = min(least, d), max(most, d)
			}
			if most <= step/2 || least >= step/2 {
				t.Errorf("wait %d: 200 draws all in [%v, %v]: not spread over [0, %v]", i, least, most, step)
			}
			if d := b.NextBackOff(); d < 0 || d > step {
				t.Fatalf("round %d, wait %d: %v outside [0, %v]", round, i, d, step)
			}
		}
		b.Reset()
	}
}
