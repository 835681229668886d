package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// series returns the samples of a counter family, each as its labels
// ("k=v,...") and value.
func series(t *testing.T, families map[string]*dto.MetricFamily, name string) map[string]float64 {
	t.Helper()
	f, ok := families[name]
	if !ok {
		return nil
	}
	if f.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("%s is a %v, want a counter", name, f.GetType())
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		out[strings.Join(labels, ",")] = m.GetCounter().GetValue()
	}
	return out
}

func TestTheScrapeShowsTheLostLeaseAndTheStaleAckAsTheirOwnSeries(t *testing.T) {
	var log bytes.Buffer
	scrape, err := scenario(context.Background(), &log)
	if err != nil {
		t.Fatalf("scenario: %v\n%s", err, log.String())
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(scrape))
	if err != nil {
		t.Fatalf("the scrape does not parse as Prometheus text: %v\n%s", err, scrape)
	}
	for _, c := range []struct {
		name string
		want map[string]float64
	}{
		// The lost lease and the refused late Ack, each a series of its own.
		{"leasehold_leases_lost_total", map[string]float64{"leasehold_queue=reports": 1}},
		{"leasehold_decisions_stale_total", map[string]float64{
			"leasehold_component=worker,leasehold_decision=ack,leasehold_queue=reports": 1}},
		// The handler's failure is invoice-1's alone, and nothing was
		// retried: the lost lease is not counted as a failure.
		{"leasehold_tasks_failed_total", map[string]float64{"leasehold_queue=reports": 1}},
		{"leasehold_tasks_retried_total", nil},
		{"leasehold_tasks_acked_total", map[string]float64{"leasehold_queue=reports": 1}},
		{"leasehold_tasks_claimed_total", map[string]float64{"leasehold_queue=reports": 3}},
		{"leasehold_tasks_enqueued_total", map[string]float64{"leasehold_queue=reports": 2}},
		{"leasehold_expired_claimed_total", map[string]float64{"leasehold_queue=reports": 1}},
		{"leasehold_expired_requeued_total", map[string]float64{"leasehold_queue=reports": 1}},
		{"leasehold_store_errors_total", map[string]float64{"leasehold_component=worker,leasehold_queue=reports": 1}},
	} {
		got := series(t, families, c.name)
		if len(got) != len(c.want) {
			t.Errorf("%s: series %v, want %v", c.name, got, c.want)
			continue
		}
		for labels, v := range c.want {
			if got[labels] != v {
				t.Errorf("%s{%s} = %v, want %v (all: %v)", c.name, labels, got[labels], v, got)
			}
		}
	}
	for _, name := range []string{"leasehold_handler_duration_seconds", "leasehold_queue_latency_seconds"} {
		if f, ok := families[name]; !ok || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s: no histogram in the scrape", name)
		}
	}
}

func TestTheProgramPrintsTheSeries(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"worker: heartbeat failed: store unreachable",
		"broker: claimed 1 expired task, requeued 1",
		`leasehold_leases_lost_total{leasehold_queue="reports"} 1` + "\n",
		`leasehold_decisions_stale_total{leasehold_component="worker",leasehold_decision="ack",leasehold_queue="reports"} 1` + "\n",
		`leasehold_tasks_failed_total{leasehold_queue="reports"} 1` + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "_bucket{") {
		t.Errorf("output prints histogram buckets:\n%s", out.String())
	}
}

// The README's section on metrics names every series the library records,
// and the scrape lines it quotes are the program's.
func TestTheReadmeNamesEverySeriesAndQuotesTheProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Metrics and traces\n")
	if !ok {
		t.Fatal("README.md has no section on metrics and traces")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	named := map[string]bool{}
	for _, name := range regexp.MustCompile("`(leasehold_[a-z_]+)`").FindAllStringSubmatch(section, -1) {
		named[name[1]] = true
	}
	for _, m := range []string{
		core.MetricTasksEnqueued, core.MetricTasksClaimed, core.MetricTasksAcked, core.MetricTasksFailed,
		core.MetricTasksRetried, core.MetricTasksReleased, core.MetricLeasesLost, core.MetricDecisionsStale,
		core.MetricTasksPromoted, core.MetricExpiredClaimed, core.MetricExpiredRequeued, core.MetricExpiredFailed,
		core.MetricExpiredRecovered, core.MetricStoreErrors, core.MetricHandlerDuration, core.MetricQueueLatency,
	} {
		suffix := "_total"
		if m == core.MetricHandlerDuration || m == core.MetricQueueLatency {
			suffix = "_seconds"
		}
		if name := strings.ReplaceAll(m, ".", "_") + suffix; !named[name] {
			t.Errorf("README.md does not name %s (%s)", name, m)
		}
	}

	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	_, quoted, ok := strings.Cut(section, "\n```\n")
	quoted, _, ok2 := strings.Cut(quoted, "```\n")
	if !ok || !ok2 || quoted == "" {
		t.Fatal("the section quotes no scrape lines")
	}
	for _, line := range strings.Split(strings.TrimSpace(quoted), "\n") {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("README.md quotes %q, which the program does not print:\n%s", line, out.String())
		}
	}
}
