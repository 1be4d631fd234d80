// Package demo is `cronlock demo`: several replicas of one job, in this process, on three lock
// nodes (embedded miniredis nodes, or the user's with --nodes), and a live table of which
// replica ran each tick, which skipped it and why, with fencing tokens and start delays.
//
// Halfway through, the replica running the current tick is cut off from every node (through
// the demo's own proxies); at the end the job is paused, resumed and triggered, and its history
// read from the nodes. Run runs the demo of a Config (main parses the command line into it);
// on the user's nodes it removes every key it wrote, and only those.
//
// Its stdout is the table and the demo's own notes only. The schedulers' log lines go to a
// temporary file whose path is the output's last line, or with -v to stderr.
package demo
