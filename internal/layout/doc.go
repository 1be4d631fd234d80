// Package layout is the one owner of what cronlock stores on the lock nodes: the names of its
// keys and channels, and the formats of the values that more than one package reads — the
// fields of a redlock lock hash, a pause, the skipped-tick marker. Every other package builds
// and parses them here; none spells a key, a field or a state of its own.
//
// Every key of a job carries the hash tag {prefix:job}, so that all of them share one Redis
// Cluster slot and one script may touch several; keys shared by the jobs of a prefix carry
// {prefix}:
//
//	{prefix:job}:tick:<unix ms>      a tick's lock, kept as a done marker after a run
//	{prefix:job}:run                 the job's run lock (Overlap Forbid)
//	{prefix:job}:trigger:<id>        a manual run's lock, in place of the tick's
//	{prefix:job}:attempts:<unix ms>  the number of runs of a tick (MaxAttempts)
//	{prefix:job}:paused              the job's pause (PauseValue)
//	{prefix:job}:history             the run history, a stream
//	{prefix:job}:history:output      the outputs kept with it, a stream
//	{prefix:job}:history:<run id>    a record's marker: that attempt was recorded
//	{prefix:job}:running             the attempts in flight, a hash
//	{prefix:job}:fence               the fencing counter (redlock's default for the tag)
//	{prefix}:triggers                the queue of manual runs asked for
//	{prefix}:triggers:asked          the channel announcing a new request
//	{prefix}:replicas                the replicas' heartbeats, a hash
//	{prefix}:replace                 the channel announcing a replaced run (Overlap Replace)
//
// and on every node, whatever the prefix, redlock's boot marker (BootKey, by default) and the
// fencing counter of the lock keys without a hash tag (FenceKey).
//
// The formats are the stored formats of every released version: a change here must read what
// the versions before wrote, for rolling upgrades.
package layout
