"""How the GPUs of one host talk under NCCL (`--link`): NCCL's own choice (NVLink, PCIe peer to
peer, shared memory); through host memory alone (`shm`: no peer-to-peer, as GPUs that share neither
NVLink nor a PCIe switch); or its socket transport alone, as between hosts joined by Ethernet. The
slower links show what overlapping communication buys where it is slow. The variables reach the
ranks before their process group starts; the records name the link."""

from __future__ import annotations

from trainperf.core.errors import SpecError
from trainperf.core.spec import check_choice

LINKS: dict[str, dict[str, str]] = {
    "auto": {},
    "shm": {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1"},
    "socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1"},
}


def check_link(link: str, backend: str) -> None:
    check_choice("link", link, LINKS)
    if link != "auto" and backend != "nccl":
        raise SpecError(f"--link {link} picks an NCCL transport; with --dist-backend {backend} use "
                        "--link auto")
