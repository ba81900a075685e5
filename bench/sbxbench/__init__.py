"""sbx-bench: benchmark runner, statistics, results files and reports.

Modules: cli (the command line), workload_boot (the `boot` workload),
workload_restore, workload_snapshot and workload_fork (the snapshot
workloads; workload_common, snapshot_commands, snapshot_origin,
guest_agent and qmp are their shared parts), workload_exec,
workload_blk and workload_vsock (a boot per measurement of
bench/virtio_guest.sh; workload_virtio and virtio_commands are theirs),
vmm_spec (--vmm lists), vmm_commands (each VMM's boot command line),
process_timing (timing a process's output), stats (percentiles and
bootstrap intervals), machine_facts, results (JSON and CSV),
schema_check (results.schema.json), report_markdown and report_plots.
docs/benchmarks.md, "sbx-bench", documents the tool and its results format.
"""
