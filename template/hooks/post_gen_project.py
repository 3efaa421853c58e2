"""Keep the baker's local paths out of the recorded answers (.cookiecutter.json is committed)."""

import json
from pathlib import Path

_LOCAL = ("_output_dir", "_repo_dir", "_checkout")

answers = Path(".cookiecutter.json")
data = json.loads(answers.read_text(encoding="utf-8"))
for name in _LOCAL:
    data.pop(name, None)
if Path(str(data.get("_template", ""))).is_absolute():
    data["_template"] = Path(data["_template"]).name
answers.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
