// Package jobseam gives cronlock's own packages the part of package job that they need and a
// user of job does not: a job's options with their defaults applied, as the scheduler runs
// the job and the daemon checks it. Users read each default in the doc of its field
// (job.Options). Keeping it here keeps job's exported API to what users call, and each
// default defined once, in job, whose Validate checks the options with it.
//
// job must stay a leaf (it imports no cronlock package), so it cannot set variables here as
// redlock does for lockseam: WithDefaults is job's unexported withDefaults itself, reached
// with a linkname directive.
package jobseam

import (
	_ "unsafe" // for go:linkname

	"github.com/cronlock/cronlock/job"
)

// WithDefaults returns o with each zero field set to its default (see job.Options).
//
//go:linkname WithDefaults github.com/cronlock/cronlock/job.withDefaults
func WithDefaults(o job.Options) job.Options
