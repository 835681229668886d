// Package oteltest checks the metrics and spans of package core with the
// OpenTelemetry SDK's in-memory reader and span recorder. It is a module of
// its own so that the library's go.mod needs only the OpenTelemetry API.
package oteltest
