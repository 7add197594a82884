"""Analysis: per-head attention statistics, head importance and pruning, figures, and the
heads-ablation report of a sweep."""
