"""Draw a heads study's report figure again from its committed files alone: the report's CSV
and the ``ablation_speed.json`` it was made with, for a study whose sweep dir is gone (the
committed docs/ablation-multi30k.png was drawn by the report code of its day).

    python scripts/draw_ablation_figure.py docs/ablation-multi30k.csv docs/ablation-multi30k.json \
        docs/ablation-multi30k.png

It draws with ``translate.ablation.figure.ablation_figure``, the function the report uses.
"""

import argparse
import csv
import io
import json
from pathlib import Path

from translate.ablation.figure import ablation_figure
from translate.ablation.results import Job, Report
from translate.io import write


def _number(text: str):
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:  # a commit or a machine's name
        return text
    return int(value) if value.is_integer() and "." not in text else value


def report_from_files(csv_path: Path, speed_path: Path) -> Report:
    """The report's rows from the CSV; each seed a job holding the BLEU its column gives."""
    with csv_path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    jobs = []
    for row in rows:
        row.setdefault("kv_heads", row["heads"])
        for seed in row["seeds"].split():
            results = {"heads": row["heads"], "kv_heads": row["kv_heads"]}
            results["bleu"] = float(row[f"bleu_seed{seed}"])
            name = f"heads={row['heads']},seed={seed}"
            jobs.append(Job(name, csv_path.parent / name, {"seed": seed}, results))
    numeric = [{k: _number(v) if k != "seeds" else v for k, v in r.items()} for r in rows]
    speed = json.loads(speed_path.read_text(encoding="utf-8"))
    return Report(csv_path.parent, numeric, jobs, [], True, "", speed=speed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="the report's ablation.csv")
    parser.add_argument("speed", type=Path, help="the ablation_speed.json it was made with")
    parser.add_argument("png", type=Path, help="the figure to write")
    args = parser.parse_args()
    fig = ablation_figure(report_from_files(args.csv, args.speed))
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)
    write(args.png, png.getvalue(), kind="ablation figure")
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
