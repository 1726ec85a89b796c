"""``tether config show``: the composed plugin tree, with each row's effective config."""

from __future__ import annotations

import argparse
import sys

from tether.cli.boot import composed
from tether.masking import mask_credentials
from tether.runtime import RuntimeFault


def config_show(args: argparse.Namespace) -> int:
    import yaml

    from tether.runtime.compose import parse_composition, resolve_plugin
    from tether.runtime.plugin import plugin_spec
    from tether.runtime.schema import to_data

    # The model is shown among the rows: no notice about it on stderr.
    document = composed(args, with_model=True, model=args.model, notice=False)
    composition = parse_composition(document, source="tether.yml")
    rows = []
    failed = False
    for row in composition.rows:
        entry: dict[str, object] = {"id": row.id, "plugin": row.plugin}
        if row.disabled:
            entry["disabled"] = True
        try:
            spec = plugin_spec(resolve_plugin(row.plugin).plugin)
            config = spec.validate_config(row.config)
            entry["config"] = to_data(config) if config is not None else {}
            for field in ("inject", "optional", "provides"):
                if names := getattr(spec, field):
                    entry[field] = list(names)
        except RuntimeFault as exc:
            entry["error"] = str(exc)
            failed = True
        rows.append(entry)
    for problem in composition.problems:
        rows.append({"id": problem.row, "error": problem.message})
        failed = True
    shown = yaml.safe_dump({"plugins": rows}, sort_keys=False, allow_unicode=True)
    sys.stdout.write(mask_credentials(shown))
    return 1 if failed else 0
