// Package core is the library a consumer imports: the Store contract that
// adapters implement, and the queue, worker, broker and inspector built on it.
// Every rule it enforces is the model's (package model).
package core
