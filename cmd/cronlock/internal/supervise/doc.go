// Package supervise runs the shell commands of `cronlock run`'s jobs so that no process of a
// run outlives its lock.
//
// Command runs one job's command, once per call, under a supervisor: a second cronlock process
// (started as `cronlock __supervise`, Mode) that starts the command in a process group of its
// own and ends that group before the run's lease can end — SIGTERM kill_grace before the
// lease's deadline, SIGKILL at it — even if the daemon dies or freezes. The daemon and the
// supervisor talk over two pipes (see Mode); Parse and Supervisor.Run are the supervisor's
// side, which the program's main calls when its first argument is Mode.
//
// The package owns the process groups: starting a command in a group of its own, signalling
// the group, and telling whether a process of the group still runs (GroupAlive).
package supervise
