package core

// Stopping reports whether the worker has stopped popping (a test hook).
func (w *Worker) Stopping() bool { return closed(w.stopping) }
