//go:build !linux

package filestore

import "os"

// aioSyncer is the asynchronous fdatasync of Linux (aio_linux.go); other
// systems sync the log with fdatasync(2) (or fsync) itself.
type aioSyncer struct{}

func newAIOSyncer() (*aioSyncer, error) { return nil, errNoAIO }

func (s *aioSyncer) fdatasync(f *os.File) error { return errNoAIO }

func (s *aioSyncer) close() {}
