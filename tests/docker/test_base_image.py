"""The real base recipe as users build it: Docker Hub's PyTorch image (in CI answered by the loopback
registry mirror of .ci/registry-mirror.sh, with the real image's layout) and rexmle/base on top of it,
which keeps that image's PyTorch instead of letting pip replace it."""

from __future__ import annotations

import pytest

from ..conftest import require_service

TORCH_IMAGE = ("pytorch/pytorch", "2.5.1-cuda12.4-cudnn9-runtime")
PROBE = ("command -v python3; command -v pip; python3 -c 'import torch, torchvision, torchaudio; "
         "print(torch.__version__, torchvision.__version__, torchaudio.__version__, torch.ones(3).sum().item())'")


def _probe(client, image: str) -> list[str]:
    return client.containers.run(image, ["sh", "-c", PROBE], remove=True, network_mode="none").decode().split()


@pytest.fixture(scope="module")
def torch_image(docker_client) -> str:
    try:
        return docker_client.images.pull(*TORCH_IMAGE).id
    except Exception as exc:  # docker.errors.APIError: no Docker Hub and no mirror answering for it
        require_service(False, "REXMLE_REQUIRE_DOCKER", f"Docker Hub or its registry mirror ({exc})")


def test_docker_hubs_pytorch_image_has_its_python_prefix_first_on_path(docker_client, torch_image):
    python3, pip, torch, vision, audio, total = _probe(docker_client, torch_image)
    assert (python3, pip) == ("/opt/conda/bin/python3", "/opt/conda/bin/pip")
    assert torch.startswith("2.5.1") and vision.startswith("0.20.1") and audio.startswith("2.5.1")
    assert float(total) == 3.0  # torch computes on CPU


def test_the_base_keeps_the_pytorch_of_the_image_it_starts_from(docker_client, torch_image, test_image):
    """Before the pin in agents/common/Dockerfile, MONAI 1.6 (wants torch >= 2.8) made pip install PyPI's newest
    torch (2.15.0+cu132 here) and another CUDA's libraries over the image's 2.5.1: 13.6 GB instead of 8.0 GB."""
    assert _probe(docker_client, test_image) == _probe(docker_client, torch_image)
    out = docker_client.containers.run(test_image, ["python3", "-c", "import monai, nnunetv2, timm, "
                                                    "segmentation_models_pytorch; print(monai.__version__)"],
                                       remove=True, network_mode="none").decode().strip()
    assert out.count(".") >= 2
