"""The measurement layer: drive a running server with traffic and summarise what it did.

Public API: `workloads.build_sessions` (what to send), `loadgen.send_workload` (streaming
client), `metrics.summarize` (vLLM bench serve's definitions), `probes.Sampler` (engine
gauges and per-process CPU while a load runs), `bottleneck.attribute` (what limited a step),
`bench.benchmark` (one workload against one server, a `bench.Load`), `serversearch.search`
(the highest request rate that meets the SLOs; the search itself is `searchplan.plan`, what
a trial keeps `capacityrecord.CapacityRecord`, its words `capacitytext.describe`),
`vllmbench` (the same steps through vLLM's own client), `benchrun.run` (`autotune bench` as
one call: a `BenchRun` against a running server or an engine launched for it) and `watch`
(every wait on the engine ends within a poll of its death: the callers pass a plain `alive`
callable). Its own: `_steady` (the steady window of a step), `_stepverdict` (a step's
verdict), `_request` (one request's record).

Imports the engine layer and the top-level basics, never tuning, results or the CLI.
"""

# The modules code outside this package imports (tests/project/test_surface.py); the
# others are the package's own, private by name (`_x.py`).
__all__ = ["bench", "benchrun", "bottleneck", "capacityrecord", "capacitytext", "loadgen",
           "measurement", "metrics", "probes", "probesummary", "searchplan", "searchresult",
           "serversearch", "speculation", "steprecord", "vllmbench", "watch", "workloads"]
