package middleware

// ErrNoRun is the error Lock returns for a context without a job.Run, for the external tests.
var ErrNoRun = errNoRun
