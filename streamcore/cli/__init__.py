"""The `streamcore` command line: log administration and inspection tools modelled on Nuxeo's
`stream.sh` (logs, create, delete, groups, lag, latency, cat, tail, position, copy, dump,
append, purge) plus `demo`. Entry point: `streamcore.cli.main:main`."""
