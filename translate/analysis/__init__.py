"""Analysis of one model: per-head attention statistics, head importance and pruning, alignment
heads, and figures. The heads ablation over a sweep's models is :mod:`translate.ablation`."""
