package job_test

// Pure logic: validation, the run in the context, outcomes. No Redis.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/jobseam"
	"github.com/cronlock/cronlock/job"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func nop(context.Context) error { return nil }

func TestValidate(t *testing.T) {
	ok := job.Job{Name: "report:daily-1", Spec: "@daily", Handler: nop}
	require.NoError(t, ok.Validate())
	with := func(f func(*job.Job)) job.Job { j := ok; f(&j); return j }
	for _, tc := range []struct {
		name         string
		job          job.Job
		field, wants string
	}{
		{"empty name", with(func(j *job.Job) { j.Name = "" }), "Name", "is empty"},
		{"long name", with(func(j *job.Job) { j.Name = strings.Repeat("x", 201) }), "Name", "at most 200"},
		{"brace", with(func(j *job.Job) { j.Name = "{x" }), "Name", "braces would break the hash tag"},
		{"tab", with(func(j *job.Job) { j.Name = "a\tb" }), "Name", "without spaces"},
		{"empty spec", with(func(j *job.Job) { j.Spec = "" }), "Spec", `e.g. "*/5 * * * *"`},
		{"nil handler", with(func(j *job.Job) { j.Handler = nil }), "Handler", "is nil"},
		{"negative timeout", with(func(j *job.Job) { j.Timeout = -1 }), "Options.Timeout", "negative"},
		{"negative TTL", with(func(j *job.Job) { j.LockTTL = -1 }), "Options.LockTTL", "negative"},
		{"negative renewal", with(func(j *job.Job) { j.RenewEvery = -1 }), "Options.RenewEvery", "negative"},
		{"renewal = TTL", with(func(j *job.Job) { j.LockTTL, j.RenewEvery = time.Second, time.Second }), "Options.RenewEvery", "not shorter than LockTTL"},
		{"renewal past half", with(func(j *job.Job) { j.RenewEvery = 20 * time.Second }), "Options.RenewEvery", "more than half of LockTTL 30s"},
		{"renewal above default TTL", with(func(j *job.Job) { j.RenewEvery = time.Minute }), "Options.RenewEvery", "not shorter than LockTTL 30s"},
		{"overlap", with(func(j *job.Job) { j.Overlap = 3 }), "Options.Overlap", "Overlap(3) is unknown"},
		{"retries", with(func(j *job.Job) { j.Retries = -2 }), "Options.Retries", "negative"},
		{"catch-up", with(func(j *job.Job) { j.CatchUp = -time.Second }), "Options.CatchUp", "negative"},
		{"jitter", with(func(j *job.Job) { j.Jitter = -time.Second }), "Options.Jitter", "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.job.Validate()
			require.ErrorIs(t, err, job.ErrInvalid)
			ie, ok := errors.AsType[*job.InvalidError](err)
			require.True(t, ok)
			assert.Equal(t, tc.field, ie.Field)
			assert.Contains(t, err.Error(), tc.wants)
			assert.Contains(t, err.Error(), tc.field+":")
		})
	}
	// A TTL alone gets a renewal of a third of it.
	assert.NoError(t, with(func(j *job.Job) { j.LockTTL = 2 * time.Second }).Validate())
}

// The defaults, as cronlock's own packages apply them (the seam is job's own function).
func TestWithDefaults(t *testing.T) {
	o := jobseam.WithDefaults(job.Options{})
	assert.Equal(t, 30*time.Second, o.LockTTL)
	assert.Equal(t, 10*time.Second, o.RenewEvery)
	assert.Equal(t, job.Forbid, o.Overlap)
	o = jobseam.WithDefaults(job.Options{LockTTL: 3 * time.Second})
	assert.Equal(t, time.Second, o.RenewEvery)
}

func TestRunInContext(t *testing.T) {
	_, ok := job.RunFrom(context.Background())
	assert.False(t, ok)
	_, ok = job.RunFrom(job.NewContext(context.Background(), nil))
	assert.False(t, ok)
	r := &job.Run{Job: "j", Tick: time.Unix(60, 0), Attempt: 2, FencingToken: 7, Replica: "r"}
	got, ok := job.RunFrom(job.NewContext(context.Background(), r))
	require.True(t, ok)
	assert.Same(t, r, got)
}

func TestSkipError(t *testing.T) {
	held := errors.New("held")
	se := &job.SkipError{Reason: job.SkipHeld, Holder: "w-2", Err: held}
	assert.ErrorIs(t, se, job.ErrSkipped)
	assert.ErrorIs(t, se, held)
	assert.Equal(t, "job: skipped: held by another replica (w-2)", se.Error())
	assert.Equal(t, "allow", job.Allow.String())
	assert.Equal(t, "window closed", job.SkipLate.String())
}

// The error types match their sentinel and the error they wrap, and only those.
func TestErrorsMatchSentinelAndCause(t *testing.T) {
	cause := &json.SyntaxError{Offset: 3}
	for _, tc := range []struct {
		err             error
		sentinel, other error
	}{
		{&job.SkipError{Reason: job.SkipHeld, Err: cause}, job.ErrSkipped, job.ErrInvalid},
		{&job.InvalidError{Field: "Spec", Problem: "bad", Err: cause}, job.ErrInvalid, job.ErrSkipped},
	} {
		err := fmt.Errorf("wrapped: %w", tc.err)
		assert.ErrorIs(t, err, tc.sentinel)
		assert.ErrorIs(t, err, cause)
		assert.NotErrorIs(t, err, tc.other)
		se, ok := errors.AsType[*json.SyntaxError](err)
		require.True(t, ok)
		assert.Same(t, cause, se)
	}
	assert.ErrorIs(t, &job.SkipError{Reason: job.SkipLate}, job.ErrSkipped)
	assert.ErrorIs(t, &job.InvalidError{Field: "Name"}, job.ErrInvalid)
	assert.NotErrorIs(t, &job.SkipError{Reason: job.SkipLate}, job.ErrInvalid)
}

func ExampleJob_Validate() {
	j := job.Job{
		Name:    "invoices",
		Spec:    "0 */5 * * * *",
		Handler: func(ctx context.Context) error { return nil },
		Options: job.Options{LockTTL: 10 * time.Second, RenewEvery: 10 * time.Second},
	}
	fmt.Println(j.Validate())
	// Output:
	// job "invoices": Options.RenewEvery: 10s is not shorter than LockTTL 10s: the lock would expire before it is renewed; use LockTTL/3 (3.333333333s), or leave it 0
}

func ExampleRunFrom() {
	handler := func(ctx context.Context) error {
		run, _ := job.RunFrom(ctx)
		fmt.Printf("%s tick %s attempt %d token %d\n", run.Job, run.Tick.UTC().Format(time.TimeOnly), run.Attempt, run.FencingToken)
		return nil
	}
	// The scheduler does this for each tick; the Lock middleware sets the token.
	ctx := job.NewContext(context.Background(), &job.Run{Job: "invoices", Tick: time.Date(2025, 1, 1, 9, 30, 0, 0, time.UTC), Attempt: 1, FencingToken: 42})
	_ = handler(ctx)
	// Output:
	// invoices tick 09:30:00 attempt 1 token 42
}

func TestLongNameIsCutInMessages(t *testing.T) {
	err := job.Job{Name: strings.Repeat("n", 10_000)}.Validate()
	require.ErrorIs(t, err, job.ErrInvalid)
	assert.Less(t, len(err.Error()), 300, err.Error())
	assert.Contains(t, err.Error(), "(10000 bytes)")
}
