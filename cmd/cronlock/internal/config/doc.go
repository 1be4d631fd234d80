// Package config reads the YAML file of `cronlock run`, `validate`, `locks` and `check`, and
// the crontab it may name: the lock nodes, the key prefix, this replica's name, the HTTP
// address, tracing settings, and the shell-command jobs.
//
//	nodes: ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]
//	jobs:
//	  - name: backup
//	    schedule: "0 */5 * * * *"
//	    command: ["/usr/local/bin/backup", "--fast"]
//	    timeout: 10m
//
// Parse checks everything it can without talking to a node or running a command, and refuses
// the file with errors that each name the file, the line and the field, and say how to fix it:
//
//	cronlock.yaml:12: jobs[1].timeout: "10x" is not a duration (e.g. 10m, 90s)
//
// It reports unknown keys (with the closest known one), keys given twice, values of the wrong
// type, bad durations, cron specs that package scheduler refuses (with the scheduler's own
// message), jobs that job.Job.Validate refuses, duplicate job names, node lists whose size
// cannot make a safe quorum, and node lists that mix standalone servers with Redis Clusters (a
// node given as cluster: [host:port, …]). Every problem in the file is reported at once (up to a limit), one
// per line.
//
// Secrets are not in the file: a node names the environment variable that holds its password
// (password_env), and Node.Password reads it when the daemon connects. Nothing in this package
// prints a password, and a job's env: cannot name the variable of a password or of the HTTP
// token (http_token_env).
//
// Whoever can change the file runs commands as the daemon: Load refuses (ErrUntrusted) a file
// that group or others can write, or that another user than root and the process's own owns,
// unless given the option Insecure.
//
// The jobs may also come from a crontab file (crontab: PATH, beside or instead of jobs:), read
// with crontab(5)'s rules: each job line becomes the YAML job that ImportCrontab prints for it,
// and is checked as that job, so its problems name the crontab's file and line the same way. A
// "# cronlock: key=value …" comment above a line gives it the job keys that the line cannot
// (name, timeout, …); a line without name= is named after its command and a hash of its
// schedule and command, the same on every host.
//
// Anchors, aliases and merge keys ("<<: *defaults") may be used, e.g. to share job settings.
//
// yaml.v3 parses the file into its node tree and converts scalars (booleans, integers); this
// package walks the tree itself rather than decoding into structs with KnownFields, because
// Decode reports unknown keys and type errors only as its own message strings, without the
// field's path and without a "did you mean", and this package does not parse another
// package's messages. The walk is what gives every problem at once with file:line:field.
package config
