package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// multiarch maps GOARCH to the Debian multiarch directory name.
var multiarch = map[string]string{
	"amd64":   "x86_64-linux-gnu",
	"arm64":   "aarch64-linux-gnu",
	"386":     "i386-linux-gnu",
	"arm":     "arm-linux-gnueabihf",
	"ppc64le": "powerpc64le-linux-gnu",
	"s390x":   "s390x-linux-gnu",
	"riscv64": "riscv64-linux-gnu",
}

var faketimeOnce = sync.OnceValues(findFaketimePreload)

// faketimePreload returns the LD_PRELOAD value for a Faketime server.
func faketimePreload() (string, error) { return faketimeOnce() }

func findFaketimePreload() (string, error) {
	libDirs := []string{"/usr/lib64", "/usr/lib", "/usr/local/lib", "/lib64", "/lib"}
	if ma := multiarch[runtime.GOARCH]; ma != "" {
		libDirs = append([]string{"/usr/lib/" + ma, "/lib/" + ma}, libDirs...)
	}
	var tried []string
	faketime := ""
	for _, dir := range libDirs {
		p := filepath.Join(dir, "faketime", "libfaketime.so.1")
		tried = append(tried, p)
		if isFile(p) {
			faketime = p
			break
		}
	}
	if faketime == "" {
		return "", fmt.Errorf("redistest: Faketime needs libfaketime, not found (tried %s): apt-get install faketime", strings.Join(tried, ", "))
	}
	// Preload glibc's malloc in front of libfaketime so that a jemalloc
	// redis-server does not deadlock at startup (see the package doc).
	for _, dir := range libDirs {
		p := filepath.Join(dir, "libc_malloc_debug.so.0")
		if isFile(p) {
			return p + ":" + faketime, nil
		}
	}
	return faketime, nil
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}
