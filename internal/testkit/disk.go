package testkit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// A disk that fills up: a small tmpfs mounted for the test, and a file
// that takes what room is left on it.

// MountTmpfs mounts a tmpfs with opts (`size=8m`, `ro,size=64k`) at dir
// until the test ends. Mounting needs root, as `make test` in CI runs: the
// test fails without it.
func MountTmpfs(t testing.TB, dir, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("mounting a tmpfs at %s needs root (make test in CI runs as root)", dir)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mounting a tmpfs at %s: %v: %s", dir, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
}

// FillDisk writes the file `filler` in dir until the disk is full, and
// returns its path: removing it makes the room again.
func FillDisk(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// in large writes, then ever smaller ones for the last blocks
	for block := make([]byte, 64<<10); len(block) > 0; block = block[:len(block)/2] {
		for {
			_, err := f.Write(block)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return path
}
