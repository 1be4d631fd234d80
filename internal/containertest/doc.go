// Package containertest tests the container image end to end: it builds the image with
// `make image`, derives a test image that adds busybox and flock for the job (as users add
// their tools), and runs three containers of it on the host network against three
// real redis-server processes. It skips when no container engine (podman, or a running
// docker; CONTAINER= picks) is found; scripts/deps.sh installs podman.
package containertest
