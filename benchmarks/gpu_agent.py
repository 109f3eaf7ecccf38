"""The agent of ``benchmarks/gpu_check.sh``: a small 3-D U-Net on a synthetic segmentation twin, on the GPU.

It runs inside the sandbox as a ``command`` agent with ``env=`` a Python prefix holding PyTorch, so that what
it proves is the user's real path: their own stack, the run's GPU, the sandbox's view. It

* prints one ``GPU_CHECK_VIEW {json}`` line: whether torch imports, whether CUDA is visible and the device's
  name, and what it can see of the host (``/root``, ``/home``, ``/tmp``, ``/dev``), for the script to judge;
* trains a U-Net (two levels, a few 3x3x3 convolutions, torch only) for ``GPU_CHECK_TRAIN_SECONDS`` on the
  task's training cases (isles22: DWI+ADC and the lesion mask; topcow: the image and its vessel classes);
* writes one NIfTI mask per test case and ``submission.csv``, which the harness then grades.

Without torch (the CPU stand-in check, where the venv has none) the model is a nearest-centroid voxel
classifier in numpy, so the same path runs end to end. NIfTI is read and written with the standard library
(``gzip``, ``struct``, ``array``): a PyTorch install need not hold nibabel, nor even numpy.
"""
from __future__ import annotations

import array
import csv
import gzip
import json
import os
import struct
import sys
import time
from pathlib import Path

DTYPES = {2: "B", 4: "h", 8: "i", 16: "f", 64: "d", 256: "b", 512: "H", 768: "I"}  # NIfTI datatype -> array code


def host_view() -> dict:
    """What the agent sees of the host: each folder's entries (or why not), and the GPU's state."""
    def entries(path: str) -> list[str] | str:
        try:
            return sorted(os.listdir(path))
        except OSError as exc:
            return f"unreadable: {exc.strerror}"
    view = {path: entries(path) for path in ("/root", "/home", "/tmp", "/dev")}
    view["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import torch
        view["torch"] = torch.__version__
        view["cuda"] = torch.cuda.is_available()
        view["device_name"] = torch.cuda.get_device_name(0) if view["cuda"] else None
    except ImportError as exc:
        view.update(torch=None, cuda=False, device_name=None, torch_error=str(exc))
    return view


def read_nifti(path: Path) -> tuple[bytes, tuple[int, ...], list[float]]:
    """The header (first 348 bytes), the shape (x, y, z) and the voxels in file order (x fastest)."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    order = "<" if struct.unpack("<i", raw[:4])[0] == 348 else ">"
    dims = struct.unpack(order + "8h", raw[40:56])
    shape = tuple(dims[1:1 + dims[0]])
    code = struct.unpack(order + "h", raw[70:72])[0]
    offset = max(int(struct.unpack(order + "f", raw[108:112])[0]), 352)
    slope, inter = struct.unpack(order + "2f", raw[112:120])
    voxels = array.array(DTYPES[code])
    count = 1
    for n in shape:
        count *= n
    voxels.frombytes(raw[offset:offset + count * voxels.itemsize])
    if (order == "<") != (sys.byteorder == "little"):
        voxels.byteswap()
    values = list(voxels)
    if slope not in (0.0, 1.0) or inter != 0.0:
        values = [v * (slope or 1.0) + inter for v in values]
    return raw[:348], shape, values


def write_nifti(path: Path, header: bytes, labels: list[int]) -> None:
    """A uint8 mask on the image's grid: its header with the datatype, bit depth, offset and scaling reset."""
    order = "<" if struct.unpack("<i", header[:4])[0] == 348 else ">"
    head = bytearray(header)
    head[70:74] = struct.pack(order + "2h", 2, 8)
    head[108:120] = struct.pack(order + "3f", 352.0, 1.0, 0.0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(bytes(head) + b"\0\0\0\0" + bytes(array.array("B", labels)), compresslevel=1))


def standardise(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    spread = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 or 1.0
    return [(v - mean) / spread for v in values]


def cases(data: Path) -> tuple[list[tuple[str, list[Path], Path | None]], list[tuple[str, list[Path], None]]]:
    """(case id, input channels, label) for training and test, for the isles22 and topcow layouts."""
    if (data / "train" / "images").is_dir():  # topcow / topbrain: images/<id>_0000.nii.gz, labels/<id>.nii.gz
        def split(name: str, labelled: bool):
            found = []
            for image in sorted((data / name / "images").glob("*_0000.nii.gz")):
                case = image.name[:-len("_0000.nii.gz")]
                label = data / name / "labels" / f"{case}.nii.gz"
                found.append((case, [image], label if labelled else None))
            return found
        return split("train", True), split("test", False)

    def split_isles(name: str, labelled: bool):  # isles22: <id>_dwi / _adc / _msk on one grid (FLAIR is not)
        found = []
        for dwi in sorted((data / name).glob("*_dwi.nii.gz")):
            case = dwi.name[:-len("_dwi.nii.gz")]
            found.append((case, [dwi, data / name / f"{case}_adc.nii.gz"],
                          data / name / f"{case}_msk.nii.gz" if labelled else None))
        return found
    return split_isles("train", True), split_isles("test", False)


def load(entry) -> tuple[bytes, tuple[int, ...], list[list[float]], list[int] | None]:
    case, channels, label = entry
    header, shape, _ = read_nifti(channels[0])
    inputs = [standardise(read_nifti(p)[2]) for p in channels]
    labels = [int(v) for v in read_nifti(label)[2]] if label is not None else None
    return header, shape, inputs, labels


def train_torch(train, n_classes: int, seconds: float):
    import torch
    from torch import nn
    device = "cuda" if torch.cuda.is_available() else "cpu"

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv3d(cin, cout, 3, padding=1), nn.InstanceNorm3d(cout), nn.LeakyReLU(),
                             nn.Conv3d(cout, cout, 3, padding=1), nn.InstanceNorm3d(cout), nn.LeakyReLU())

    class UNet3D(nn.Module):
        """Two levels: a block, a 2x down-sampled block, an up-convolution and a block over both."""

        def __init__(self, cin: int, classes: int, width: int = 32) -> None:
            super().__init__()
            self.enc, self.mid = block(cin, width), block(width, 2 * width)
            self.up = nn.ConvTranspose3d(2 * width, width, 2, stride=2)
            self.dec, self.out = block(2 * width, width), nn.Conv3d(width, classes, 1)

        def forward(self, x):
            skip = self.enc(x)
            deep = self.up(self.mid(nn.functional.max_pool3d(skip, 2)))
            return self.out(self.dec(torch.cat([skip, deep], 1)))

    def tensor(shape, inputs):  # file order is x fastest: (z, y, x) in C order; padded to even sizes
        x = torch.tensor(inputs, dtype=torch.float32).reshape(len(inputs), *reversed(shape))
        pads = [0, 0] * 3
        for axis, n in enumerate(x.shape[1:]):
            pads[2 * (2 - axis) + 1] = n % 2
        return nn.functional.pad(x, pads)

    model = UNet3D(len(train[0][2]), n_classes).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = []
    for _, shape, inputs, labels in train:
        x = tensor(shape, inputs)
        y = tensor(shape, [labels])[0].long()
        batches.append((x[None].to(device), y[None].to(device)))
    steps, started, loss = 0, time.monotonic(), None
    while time.monotonic() - started < seconds or not steps:
        for x, y in batches:
            if steps and time.monotonic() - started >= seconds:
                break
            optimiser.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimiser.step()
            steps += 1
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"trained on {device}: {steps} steps in {time.monotonic() - started:.1f} s, last loss "
          f"{float(loss.detach()):.4f}, peak memory {torch.cuda.max_memory_allocated() if device == 'cuda' else 0} bytes")

    def predict(shape, inputs) -> list[int]:
        with torch.no_grad():
            scores = model(tensor(shape, inputs)[None].to(device))[0]
        z, y, x = reversed(shape)
        return scores.argmax(0)[:z, :y, :x].to(torch.uint8).flatten().cpu().tolist()
    return predict


def train_numpy(train, n_classes: int):
    """Nearest class centroid per voxel over the standardised channels (the stand-in check's model)."""
    import numpy as np
    x = np.concatenate([np.array(inputs).T for _, _, inputs, _ in train])
    y = np.concatenate([np.array(labels) for *_, labels in train])
    centroids = np.array([x[y == c].mean(0) if (y == c).any() else np.full(x.shape[1], np.inf)
                          for c in range(n_classes)])
    print(f"trained nearest centroids with numpy on {len(y)} voxels, {n_classes} classes")

    def predict(shape, inputs) -> list[int]:
        distance = ((np.array(inputs).T[:, None, :] - centroids[None]) ** 2).sum(-1)
        return distance.argmin(1).astype(np.uint8).tolist()
    return predict


def main() -> None:
    view = host_view()
    print("GPU_CHECK_VIEW " + json.dumps(view, sort_keys=True), flush=True)
    print(f"torch {view['torch']}, torch.cuda.is_available() = {view['cuda']}, device: {view['device_name']}")
    data, out = Path(os.environ["REXMLE_DATA_DIR"]), Path(os.environ["REXMLE_SUBMISSION_DIR"])
    train_cases, test_cases = cases(data)
    train = [load(entry) for entry in train_cases]
    # the models predict class indices; the task's label values need not be contiguous (topcow has no 13, 14)
    values = sorted({v for *_, labels in train for v in labels})
    index = {v: i for i, v in enumerate(values)}
    train = [(header, shape, inputs, [index[v] for v in labels]) for header, shape, inputs, labels in train]
    n_classes = len(values)
    print(f"{len(train)} training and {len(test_cases)} test cases, label values {values}", flush=True)
    seconds = float(os.environ.get("GPU_CHECK_TRAIN_SECONDS", "30"))
    predict = train_torch(train, n_classes, seconds) if view["torch"] else train_numpy(train, n_classes)
    id_column = (data / "sample_submission.csv").read_text().split(",", 1)[0]
    rows = [(id_column, "predicted_mask_path")]
    for entry in test_cases:
        header, shape, inputs, _ = load(entry)
        relative = f"predictions/{entry[0]}.nii.gz"
        write_nifti(out / relative, header, [values[i] for i in predict(shape, inputs)])
        rows.append((entry[0], relative))
    with open(out / "submission.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    print(f"wrote {len(rows) - 1} predictions")


if __name__ == "__main__":
    main()
