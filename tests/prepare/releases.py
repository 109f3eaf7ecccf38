"""Tiny fake releases with each real release's internal layout and file naming.

Every builder returns archive bytes keyed by the file name the source publishes. Images are a few
voxels/pixels, made with SimpleITK, Pillow and tifffile. Each release has 6 complete cases (split
4 train / 2 test by the split rule) plus the irregularities the preparers must handle: an incomplete case,
macOS debris, a label on a slightly different grid (resampled), an NRRD header without its blank line.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import SimpleITK as sitk
import tifffile
from PIL import Image

N = 6  # complete cases per release -> 4 train / 2 test


def zip_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def tar_bytes(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def volume_bytes(array: np.ndarray, suffix: str, spacing=(0.5, 0.5, 0.8), origin=(0.0, 0.0, 0.0)) -> bytes:
    img = sitk.GetImageFromArray(array)
    img.SetSpacing(spacing)
    img.SetOrigin(origin)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"v{suffix}"
        sitk.WriteImage(img, str(path), useCompression=True)
        return path.read_bytes()


def png_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def tiff_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    tifffile.imwrite(buf, array)
    return buf.getvalue()


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _blob_labels(rng: np.random.Generator, shape=(6, 8, 10), values=(1,)) -> np.ndarray:
    lab = np.zeros(shape, np.uint8)
    for _k, v in enumerate(values):
        z, y, x = (int(rng.integers(1, s - 2)) for s in shape)
        lab[z:z + 2, y:y + 2, x:x + 2] = v
    return lab


# -- per competition ----------------------------------------------------------------------------------
def usenhance() -> dict[str, bytes]:
    rng = _rng(1)
    files = {}
    organs = ["breast", "carotid", "kidney", "liver", "thyroid"]
    for k in range(N):
        organ = organs[k % 5]
        for quality in ("low_quality", "high_quality"):
            files[f"train_datasets/{organ}/{quality}/{k + 1}.png"] = png_bytes(rng.integers(0, 255, (12, 14), np.uint8))
    files["train_datasets/kidney/low_quality/99.png"] = png_bytes(np.zeros((12, 14), np.uint8))  # no pair
    files["__MACOSX/train_datasets/._x.png"] = b"junk"
    return {"train_dataset.zip": zip_bytes(files)}


def ldct() -> tuple[dict[str, bytes], dict[str, bytes]]:
    """(Zenodo record files, the manual Google Drive test archive)."""
    rng = _rng(2)
    train = {f"{i:04d}.tif": float(np.round(rng.uniform(0, 4), 2)) for i in range(8)}
    test = {f"{i:04d}.tiff": float(np.round(rng.uniform(0, 4), 2)) for i in range(1000, 1005)}
    zfiles = {f"LDCTIQAG2023_train/image/{n}": tiff_bytes(rng.random((8, 8), np.float32)) for n in train}
    zfiles["LDCTIQAG2023_train/train.json"] = json.dumps(train).encode()
    tfiles = {f"LDCTIQAC_test/images/{n}": tiff_bytes(rng.random((8, 8), np.float32)) for n in test}
    tfiles["LDCTIQAC_test/test.json"] = json.dumps(test).encode()
    return {"LDCTIQAG2023_train.zip": zip_bytes(zfiles)}, {"test_dataset.zip": zip_bytes(tfiles)}


def panther() -> dict[str, bytes]:
    rng = _rng(3)
    t1, t2 = {}, {}
    for k in range(N):
        pid = str(10000 + k)
        lab = _blob_labels(rng, values=(1, 2) if k % 2 else (1,))
        t1[f"PANTHER_Task1/ImagesTr/{pid}_0001_0000.mha"] = volume_bytes(rng.integers(0, 500, lab.shape).astype(np.int16), ".mha")
        origin = (0.0, 0.0, 0.0005) if k == 0 else (0.0, 0.0, 0.0)  # within tolerance: copied, not resampled
        t1[f"PANTHER_Task1/LabelsTr/{pid}_0001.mha"] = volume_bytes(lab, ".mha", origin=origin)
        t2[f"PANTHER_Task2/ImagesTr/{10300 + k}_0000.mha"] = volume_bytes(rng.integers(0, 500, lab.shape).astype(np.int16), ".mha")
        t2[f"PANTHER_Task2/LabelsTr/{10300 + k}.mha"] = volume_bytes(lab, ".mha", origin=(0.0, 2.0, 0.0) if k == 1 else (0, 0, 0))
    t1["PANTHER_Task1/ImagesTr/10099_0001_0000.mha"] = t1["PANTHER_Task1/ImagesTr/10000_0001_0000.mha"]  # no label
    t1["PANTHER_Task1/ImagesTr_unlabeled/10500_0002_0000.mha"] = volume_bytes(np.zeros((4, 5, 6), np.int16), ".mha")
    return {"PANTHER_Task1.zip": zip_bytes(t1), "PANTHER_Task2.zip": zip_bytes(t2)}


def strip_nrrd_blank_line(data: bytes) -> bytes:
    """Remove the blank line after the NRRD header (the defect of some SEG.A files)."""
    at = data.index(b"\n\n")
    return data[:at + 1] + data[at + 2:]


def sega() -> dict[str, bytes]:
    rng = _rng(4)
    centres = {"Dongyang": ["D1", "D2", "D10"], "KiTS": ["K1", "K2"], "Rider": ["R1"]}
    out = {}
    for centre, cases in centres.items():
        files = {}
        for case in cases:
            lab = _blob_labels(rng)
            image = volume_bytes(rng.integers(-100, 400, lab.shape).astype(np.int16), ".nrrd", spacing=(0.8, 0.8, 2.0))
            label = volume_bytes(lab, ".nrrd", spacing=(0.8, 0.8, 2.0))
            if case == "D2":
                image = strip_nrrd_blank_line(image)
            files[f"{centre}/{case}/{case}.nrrd"] = image
            files[f"{centre}/{case}/{case}.seg.nrrd"] = label
        out[f"{centre}.zip"] = zip_bytes(files)
    return out


def dentex() -> dict[str, bytes]:
    rng = _rng(5)
    images, annotations, files = [], [], {}
    root = "training_data/quadrant-enumeration-disease"
    for k in range(N + 1):
        name = f"train_{k}.png"
        images.append({"id": k + 1, "file_name": name, "width": 40, "height": 30})
        if k < N:  # the last image entry has no file
            files[f"{root}/xrays/{name}"] = png_bytes(rng.integers(0, 255, (30, 40), np.uint8))
        for j in range(3):
            annotations.append({"id": len(annotations) + 1, "image_id": k + 1, "iscrowd": 0,
                                "bbox": [float(2 + 9 * j), 3.0, 7.0, 9.0], "area": 63.0,
                                "category_id_1": j % 4, "category_id_2": (k + j) % 8, "category_id_3": (k * j) % 4})
    coco = {"images": images, "annotations": annotations,
            "categories_1": [{"id": i, "name": str(i + 1)} for i in range(4)],
            "categories_2": [{"id": i, "name": str(i + 1)} for i in range(8)],
            "categories_3": [{"id": 0, "name": "Impacted"}, {"id": 1, "name": "Caries"},
                             {"id": 2, "name": "Periapical Lesion"}, {"id": 3, "name": "Deep Caries"}]}
    files[f"{root}/train_quadrant_enumeration_disease.json"] = json.dumps(coco).encode()
    files["training_data/quadrant/xrays/train_0.png"] = png_bytes(np.zeros((30, 40), np.uint8))  # other subset
    files["training_data/quadrant/train_quadrant.json"] = b"{}"
    return {"training_data.zip": zip_bytes(files)}


TOPCOW_YML = """anterior:
  L-A1: {0}
  Acom: {1}
  3rd-A2: {2}
  R-A1: {3}
posterior:
  L-Pcom: {4}
  L-P1: {5}
  R-P1: {6}
  R-Pcom: {7}
"""


def topcow() -> dict[str, bytes]:
    rng = _rng(6)
    files = {}
    top = "TopCoW2024_Data_Release"
    for mod in ("ct", "mr"):
        for k in range(1, N + 1):
            cid = f"topcow_{mod}_{k:03d}"
            lab = _blob_labels(rng, (8, 10, 12), values=(1, 4, 6, 10 if k % 2 else 8))
            files[f"{top}/imagesTr/{cid}_0000.nii.gz"] = volume_bytes(rng.integers(0, 300, lab.shape).astype(np.int16), ".nii.gz")
            files[f"{top}/cow_seg_labelsTr/{cid}.nii.gz"] = volume_bytes(lab, ".nii.gz")
            files[f"{top}/roi_loc_labelsTr/{cid}.txt"] = (
                f"--- ROI Meta Data ---\nSize (Voxels): {3 + k} 4 5\nLocation (Voxels): 1 {k % 3} 2\n").encode()
            edges = [1, k % 2, 0, 1, (k // 2) % 2, 1, 1, k % 3 == 0]
            files[f"{top}/antpos_edges_labelsTr/{cid}.yml"] = TOPCOW_YML.format(*map(int, edges)).encode()
    return {"TopCoW2024_Data_Release.zip": zip_bytes(files)}


def _feature(name: str, kind: str, coords) -> dict:
    return {"type": "Feature", "geometry": {"type": kind, "coordinates": coords},
            "properties": {"classification": {"name": name}}}


def puma() -> dict[str, bytes]:
    rng = _rng(7)
    rois, tissue, nuclei = {}, {}, {}
    names = ["nuclei_tumor", "nuclei_lymphocyte", "nuclei_plasma_cell", "nuclei_histiocyte", "nuclei_stroma",
             "nuclei_endothelium"]
    cases = [f"training_set_primary_roi_{i:03d}" for i in (1, 2, 3)] + \
            [f"training_set_metastatic_roi_{i:03d}" for i in (1, 2, 3)]
    for k, case in enumerate(cases):
        img = np.concatenate([rng.integers(0, 255, (32, 32, 3), np.uint8), np.full((32, 32, 1), 255, np.uint8)], -1)
        buf = io.BytesIO()
        Image.fromarray(img, "RGBA").save(buf, format="TIFF")
        rois[f"01_training_dataset_tif_ROIs/{case}.tif"] = buf.getvalue()
        feats = [_feature("tissue_stroma", "Polygon", [[[0, 0], [32, 0], [32, 32], [0, 32], [0, 0]]]),
                 _feature("tissue_tumor", "Polygon", [[[4, 4], [14 + k, 4], [20, 20], [4, 20], [4, 4]],
                                                      [[8, 8], [12, 8], [12, 12], [8, 8]]]),
                 _feature("tissue_epidermis", "MultiPolygon", [[[[22, 22], [30, 22], [30, 30], [22, 22]]]])]
        tissue[f"01_training_dataset_geojson_tissue/{case}_tissue.geojson"] = json.dumps(
            {"type": "FeatureCollection", "features": feats}).encode()
        nfeats = [_feature(names[(k + j) % len(names)], "Polygon",
                           [[[3 + 8 * j, 5], [6 + 8 * j, 5], [6 + 8 * j, 8], [3 + 8 * j, 5]]]) for j in range(3)]
        nuclei[f"01_training_dataset_geojson_nuclei/{case}_nuclei.geojson"] = json.dumps(
            {"type": "FeatureCollection", "features": nfeats}).encode()
    # an extra ROI without annotations is not a case of any task
    rois["01_training_dataset_tif_ROIs/training_set_primary_roi_099.tif"] = rois[
        "01_training_dataset_tif_ROIs/training_set_primary_roi_001.tif"]
    return {"01_training_dataset_tif_ROIs.zip": zip_bytes(rois),
            "01_training_dataset_geojson_tissue.zip": zip_bytes(tissue),
            "01_training_dataset_geojson_nuclei.zip": zip_bytes(nuclei)}


def isles() -> dict[str, bytes]:
    rng = _rng(8)
    files = {}
    for k in range(1, N + 1):
        sub = f"sub-strokecase{k:04d}"
        lab = _blob_labels(rng, (5, 8, 8))
        base = f"ISLES-2022/{sub}/ses-0001"
        files[f"{base}/dwi/{sub}_ses-0001_dwi.nii.gz"] = volume_bytes(rng.integers(0, 900, lab.shape).astype(np.int16), ".nii.gz", (2, 2, 3))
        files[f"{base}/dwi/{sub}_ses-0001_adc.nii.gz"] = volume_bytes(rng.integers(0, 900, lab.shape).astype(np.int16), ".nii.gz", (2, 2, 3))
        files[f"{base}/anat/{sub}_ses-0001_FLAIR.nii.gz"] = volume_bytes(np.zeros((6, 9, 9), np.int16), ".nii.gz", (1.5, 1.5, 2))
        # case 3's mask sits on a 2-voxel-smaller grid: the preparer resamples it onto the DWI grid
        mask = lab[:, :6, :] if k == 3 else lab
        files[f"ISLES-2022/derivatives/{sub}/ses-0001/{sub}_ses-0001_msk.nii.gz"] = volume_bytes(mask, ".nii.gz", (2, 2, 3))
    return {"ISLES-2022.zip": zip_bytes(files), "center_ids.xlsx": b"PK\x03\x04 not really a workbook"}


def cellseg() -> dict[str, bytes]:
    rng = _rng(9)

    def labels() -> np.ndarray:
        lab = np.zeros((24, 24), np.uint16)
        y, x = (int(v) for v in rng.integers(3, 8, 2))
        lab[y:y + 5, x:x + 5] = 1
        lab[12:18, 11:16] = 2
        return lab

    train = {}
    for k in range(1, 4):
        train[f"Training-labeled/images/cell_{k:05d}.png"] = png_bytes(rng.integers(0, 255, (24, 24, 3), np.uint8))
        train[f"Training-labeled/labels/cell_{k:05d}_label.tiff"] = tiff_bytes(labels())
    train["Training-labeled/images/cell_00099.bmp"] = png_bytes(np.zeros((24, 24), np.uint8))  # no label
    tuning = {}
    for k in range(1, 4):  # same stems as the training set: ids stay distinct through the prefix
        tuning[f"Tuning/images/cell_{k:05d}.tiff"] = tiff_bytes(rng.integers(0, 255, (24, 24), np.uint8))
        tuning[f"Tuning/labels/cell_{k:05d}_label.tiff"] = tiff_bytes(labels())
    return {"Training-labeled.zip": zip_bytes(train), "Tuning.zip": zip_bytes(tuning),
            "train-unlabeled-part1.zip": b"never downloaded", "train-unlabeled-part2.zip": b"never downloaded",
            "Testing.zip": b"never downloaded"}


def topbrain() -> dict[str, bytes]:
    rng = _rng(10)
    files = {}
    top = "TopBrain_Data_Release_Batches1n2_081425"
    for mod, values in (("ct", (1, 4, 6, 40)), ("mr", (1, 4, 6, 42))):
        for k in range(1, N + 1):
            cid = f"topcow_{mod}_{k:03d}"
            lab = _blob_labels(rng, (8, 10, 12), values=values)
            files[f"{top}/imagesTr_topbrain_{mod}/{cid}_0000.nii.gz"] = volume_bytes(rng.integers(0, 300, lab.shape).astype(np.int16), ".nii.gz")
            files[f"{top}/labelsTr_topbrain_{mod}/{cid}.nii.gz"] = volume_bytes(lab, ".nii.gz")
    return {f"{top}.zip": zip_bytes(files)}
