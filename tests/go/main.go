// Command oncelog-go-harness: franz-go's GroupTransactSession doing consume-transform-produce
// against a Kafka-compatible broker (tests/integration/test_go_client.py runs it against
// `oncelog serve`). Every input record's value is copied once, with a prefix, to the output
// topic; the group's offsets are committed inside the same transaction (KIP-447 style).
//
// It runs until SIGTERM/SIGINT, then ends the open transaction (abort) and leaves the group.
// Progress goes to stdout as one JSON object a line:
//
//	{"event":"committed","records":N,"total":T}  a transaction committed with N records
//	{"event":"aborted","records":N,"error":"…"}  a transaction was aborted (it is retried)
//	{"event":"error","error":"…"}                 a poll or produce error (retried)
//	{"event":"abort-retried"}                      a failed End was ended by End(TryAbort)
//	{"event":"stopped","total":T}                 clean exit
//
// Usage: oncelog-go-harness -brokers HOST:PORT -in TOPIC -out TOPIC -group G -txn-id ID
//
//	[-prefix P] [-max-poll N] [-txn-pause D]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func emit(fields map[string]any) {
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma separated")
	in := flag.String("in", "", "input topic")
	out := flag.String("out", "", "output topic")
	group := flag.String("group", "", "consumer group")
	txnID := flag.String("txn-id", "", "transactional id")
	prefix := flag.String("prefix", "copied:", "prefix added to every copied value")
	maxPoll := flag.Int("max-poll", 50, "records per transaction at most")
	pause := flag.Duration("txn-pause", 0, "pause after each transaction (paces the run)")
	flag.Parse()
	if *in == "" || *out == "" || *group == "" || *txnID == "" {
		flag.Usage()
		os.Exit(2)
	}

	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(strings.Split(*brokers, ",")...),
		kgo.TransactionalID(*txnID),
		kgo.TransactionTimeout(10*time.Second),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*in),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DefaultProduceTopic(*out),
		kgo.RetryTimeout(60*time.Second),
	)
	if err != nil {
		emit(map[string]any{"event": "fatal", "error": err.Error()})
		os.Exit(1)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	total := 0
	for ctx.Err() == nil {
		fetches := sess.PollRecords(ctx, *maxPoll)
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			emit(map[string]any{"event": "error", "error": fmt.Sprintf("fetch %s[%d]: %v", topic, partition, err)})
		})
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			emit(map[string]any{"event": "fatal", "error": "begin: " + err.Error()})
			os.Exit(1)
		}
		for _, r := range records {
			copied := &kgo.Record{Key: r.Key, Value: append([]byte(*prefix), r.Value...)}
			sess.Produce(ctx, copied, func(_ *kgo.Record, err error) {
				if err != nil {
					emit(map[string]any{"event": "error", "error": "produce: " + err.Error()})
				}
			})
		}
		committed, err := sess.End(context.Background(), kgo.TryCommit)
		switch {
		case committed:
			total += len(records)
			emit(map[string]any{"event": "committed", "records": len(records), "total": total})
		case err != nil:
			emit(map[string]any{"event": "aborted", "records": len(records), "error": err.Error()})
			// An End that failed on a transport error (say the broker died under the
			// EndTxn) leaves the transaction open in the client, its outcome unconfirmed;
			// franz-go's contract (EndTransaction's doc) is to retry the end with TryAbort,
			// which re-inits the producer id (bumping the epoch fence-aborts whatever the
			// broker still holds). Begin before that fails: "already in a transaction".
			if !abortUntilEnded(ctx, sess) {
				os.Exit(1)
			}
		default:
			emit(map[string]any{"event": "aborted", "records": len(records), "error": ""})
		}
		if *pause > 0 {
			time.Sleep(*pause)
		}
	}
	sess.Close()
	emit(map[string]any{"event": "stopped", "total": total})
}

// abortUntilEnded retries End with TryAbort after a failed End until it succeeds (false, after
// a "fatal" line, when it still fails after a minute: the broker is not coming back).
func abortUntilEnded(ctx context.Context, sess *kgo.GroupTransactSession) bool {
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := sess.End(ctx, kgo.TryAbort)
		if err == nil {
			emit(map[string]any{"event": "abort-retried"})
			return true
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			emit(map[string]any{"event": "fatal", "error": "abort retry: " + err.Error()})
			return false
		}
		emit(map[string]any{"event": "error", "error": "abort retry: " + err.Error()})
		time.Sleep(200 * time.Millisecond) // back off before dialling the broker again
	}
}
