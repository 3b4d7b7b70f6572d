#!/usr/bin/python3
"""rlqs_client.py - Envoys of our own against rateld's Rate Limit Quota
Service: python3-grpcio with stubs that python3-grpc-tools generates from
proto/ at run time (rls_client.py's way; nothing generated is committed).

  rlqs_client.py three ADDR PID CONFIG NOBUCKET_CONFIG
      three Envoys on one bucket (the test's policy: 60/1s, ttl 2 s),
      each spending only what it is assigned; prints "ok NAME" or
      "FAIL NAME: why" per check:
        - at every instant the rates assigned and not expired sum to at
          most 60 (checked at each assignment received);
        - demand 50/30/10: the shares follow it; then the third goes
          quiet and the first wants more: the third's share drops, the
          first's grows, only once the third's old assignment expired;
        - CONFIG replaced by NOBUCKET_CONFIG and SIGHUP to PID: every
          stream gets an AbandonAction for the bucket (then CONFIG back);
        - malformed messages end a stream with a gRPC error, not a crash;
        - SIGTERM to PID: every assignment comes back with a TTL of 0 and
          the streams end with OK.
"""
import os
import queue
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rls_client  # noqa: E402  (its stubs() makes ours too)

RATE = 60
TTL = 2.0
BUCKET = {"name": "api", "tenant": "t1"}

rls_client.FILES += [
    "envoy/type/v3/token_bucket.proto",
    "envoy/type/v3/ratelimit_strategy.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
]
rls_client.stubs()
import grpc  # noqa: E402
from envoy.service.rate_limit_quota.v3 import rlqs_pb2, rlqs_pb2_grpc  # noqa: E402

checks = {"passed": 0, "failed": 0}
lock = threading.Lock()
log = []  # (time, envoy, rate or None, ttl) for every assignment received


def check(name, cond, why=""):
    if cond:
        print("ok " + name)
        checks["passed"] += 1
    else:
        print("FAIL %s: %s" % (name, why))
        checks["failed"] += 1
    sys.stdout.flush()


class Envoy:
    """One stream: reports usage, keeps a token bucket per assignment."""

    def __init__(self, name, addr):
        self.name = name
        self.out = queue.Queue()
        self.rate = None      # tokens per second assigned (None: none)
        self.ttl = None
        self.tokens = 0.0
        self.burst = 0
        self.actions = []     # (time, kind, rate, ttl)
        self.status = None    # the stream's end: grpc status code
        self.demand = 0
        self.first = True
        chan = grpc.insecure_channel(addr)
        stub = rlqs_pb2_grpc.RateLimitQuotaServiceStub(chan)
        self.calls = stub.StreamRateLimitQuotas(self._requests())
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _requests(self):
        while True:
            m = self.out.get()
            if m is None:
                return
            yield m

    def _read(self):
        try:
            for resp in self.calls:
                now = time.monotonic()
                for a in resp.bucket_action:
                    self._apply(now, a)
            self.status = grpc.StatusCode.OK
        except grpc.RpcError as e:
            self.status = e.code()

    def _apply(self, now, a):
        with lock:
            if a.WhichOneof("bucket_action") == "abandon_action":
                self.actions.append((now, "abandon", None, None))
                self.rate = None
                return
            q = a.quota_assignment_action
            ttl = q.assignment_time_to_live.seconds + \
                q.assignment_time_to_live.nanos / 1e9
            st = q.rate_limit_strategy
            if st.WhichOneof("strategy") == "token_bucket":
                tb = st.token_bucket
                fill = tb.fill_interval.seconds + tb.fill_interval.nanos / 1e9
                rate = tb.tokens_per_fill.value / fill
                if rate != self.rate:
                    self.tokens = tb.max_tokens  # a new bucket starts full
                self.burst = tb.max_tokens
            else:
                rate = 0.0
            self.rate, self.ttl = rate, ttl
            self.actions.append((now, "assign", rate, ttl))
            log.append((now, self.name, rate, ttl))

    def report(self, elapsed):
        """Spends what the assignment allows of demand x elapsed, and
        reports it."""
        with lock:
            want = int(round(self.demand * elapsed))
            if self.rate is None:
                allowed = 0
            else:
                self.tokens = min(self.burst, self.tokens + self.rate * elapsed)
                allowed = min(want, int(self.tokens))
                self.tokens -= allowed
        m = rlqs_pb2.RateLimitQuotaUsageReports()
        if self.first:
            m.domain = "rlqs-test"
            self.first = False
        u = m.bucket_quota_usages[1]
        u.bucket_id.bucket.update(BUCKET)
        u.time_elapsed.FromNanoseconds(int(elapsed * 1e9))
        u.num_requests_allowed = allowed
        u.num_requests_denied = want - allowed
        self.out.put(m)
        return allowed

    def close(self):
        self.out.put(None)


def worst_sum():
    """The highest sum of live assignments at any assignment received."""
    worst = 0.0
    for t, _, _, _ in log:
        # An earlier, larger assignment not expired may still be in use
        # (the new one in flight): each Envoy counts its highest.
        held = {}
        for t2, name, rate, ttl in log:
            if t2 <= t and t2 + ttl > t:
                held[name] = max(held.get(name, 0.0), rate)
        worst = max(worst, sum(held.values()))
    return worst


def run(envoys, seconds, step=0.25):
    end = time.monotonic() + seconds
    spent = 0
    while time.monotonic() < end:
        time.sleep(step)
        for e in envoys:
            spent += e.report(step)
    return spent


def latest(e):
    with lock:
        return e.rate


def malformed(addr):
    chan = grpc.insecure_channel(addr)
    raw = chan.stream_stream(
        "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/"
        "StreamRateLimitQuotas",
        request_serializer=lambda b: b, response_deserializer=lambda b: b)
    out = []
    for name, msgs in (("garbage", [b"\xff\xff\xff"]),
                       ("no_domain", [rlqs_pb2.RateLimitQuotaUsageReports()
                                      .SerializeToString()])):
        try:
            list(raw(iter(msgs), timeout=5))
            out.append((name, "OK"))
        except grpc.RpcError as e:
            out.append((name, e.code().name))
    return out


def three(addr, pid, config, nobucket):
    shutil.copyfile(config, config + ".orig")
    a, b, c = (Envoy(n, addr) for n in "abc")
    a.demand, b.demand, c.demand = 50, 30, 10
    spent = run([a, b, c], 4.0)
    check("rlqs_assigned_all", all(latest(e) is not None for e in (a, b, c)),
          "rates %s" % [latest(e) for e in (a, b, c)])
    check("rlqs_split_by_demand", latest(a) > latest(b) > latest(c),
          "rates %s" % [latest(e) for e in (a, b, c)])
    check("rlqs_spent_within", spent <= RATE * 4.5 + RATE,
          "%d spent in 4 s" % spent)
    # The third goes quiet, the first wants more.
    before_c, before_a = latest(c), latest(a)
    t_quiet = time.monotonic()
    c.demand, a.demand = 0, 80
    run([a, b, c], 5.0)
    check("rlqs_quiet_drops", latest(c) < before_c,
          "c %s -> %s" % (before_c, latest(c)))
    check("rlqs_busy_grows", latest(a) > before_a,
          "a %s -> %s" % (before_a, latest(a)))
    # "Only after the TTL": at every assignment received, what each Envoy
    # may still use (its highest assignment not expired) sums to <= RATE.
    w = worst_sum()
    check("rlqs_sum_at_most_rate", w <= RATE + 1e-9,
          "assigned rates summed to %.1f > %d" % (w, RATE))
    print("# rlqs: worst sum of live assignments %.1f of %d; rates now %s" %
          (w, RATE, [latest(e) for e in (a, b, c)]))
    for name, code in malformed(addr):
        check("rlqs_malformed_" + name, code in ("INTERNAL", "INVALID_ARGUMENT"),
              "ended with %s" % code)
    # Reload without the bucket: abandoned on every stream.
    shutil.copyfile(nobucket, config)
    t_reload = time.monotonic()
    os.kill(pid, signal.SIGHUP)
    run([a, b, c], 1.5)
    check("rlqs_abandon_on_reload",
          all(any(k == "abandon" and t > t_reload for t, k, _, _ in e.actions)
              for e in (a, b, c)),
          "actions after the reload: %s" %
          [[k for t, k, _, _ in e.actions if t > t_reload] for e in (a, b, c)])
    # The bucket back: subscribed again at the next reports.
    shutil.copyfile(config + ".orig", config)
    os.kill(pid, signal.SIGHUP)
    run([a, b, c], 1.5)
    # SIGTERM: every assignment expired (TTL 0), then the streams end.
    t_term = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    for e in (a, b, c):
        e.reader.join(10)
    check("rlqs_expired_on_stop",
          all(any(k == "assign" and ttl == 0 and t > t_term
                  for t, k, _, ttl in e.actions) for e in (a, b, c)),
          "actions after SIGTERM: %s" %
          [[(k, ttl) for t, k, _, ttl in e.actions if t > t_term]
           for e in (a, b, c)])
    check("rlqs_streams_end_ok",
          all(e.status == grpc.StatusCode.OK for e in (a, b, c)),
          "statuses %s" % [e.status for e in (a, b, c)])
    for e in (a, b, c):
        e.close()


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "three":
        three(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
        print("%d passed, %d failed" % (checks["passed"], checks["failed"]))
        sys.exit(1 if checks["failed"] else 0)
    print(__doc__)
    sys.exit(2)
