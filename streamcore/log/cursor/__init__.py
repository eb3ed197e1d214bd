"""What the cursor backends (local and memory) share: a tailer over per-partition cursors and
dynamic consumer groups built on it."""
