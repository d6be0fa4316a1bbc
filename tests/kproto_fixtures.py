"""A complete pod as a real API server sends it in protobuf, for the decoder's tests and the
informer benchmark (which cannot otherwise see what the emulator's trimmed protobuf leaves out)."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

# A realistic pod (labels, 5 annotations, ownerRef, projected volume, 2 containers with env,
# probes with IntOrString ports and Quantities, tolerations, 5 conditions, containerStatuses)
# serialised by the official protobuf runtime (7.36) from classes compiled out of upstream's
# k8s.io/api core/v1 and apimachinery generated.proto; zlib + base64.
OFFICIAL_POD = (
    "eNrtVs1vE0cU9+KPOA+3mFHKx5ZGwYU2BfYzdmzvpcUBRFChVoh6CEJodnYWL17vrmZmnRjEhVOPvVXqqaraS9VW"
    "Kpf+C1x66V/SSy+oh846dj4IKUgc2kNn7d317/1m5r0378P9Fs/BLBwZWijfjT305AT8VoITm9TVmlrDa/lN0nbr"
    "2pYpRxNVX8TVQsS1Zi134Zzlm6SNl6jWdG1PqxOLam3c8jVzdzTtkjV+dkrlb75/9ktpowoFEVCGyj6LI0Ejb+Mo"
    "5Gk0RIWExd5GBfI4SVBxvOuYTPEAlRM8GtBI8I15OJ7EniboIAmxoFoP8x6a3dHOvQjv9ltcH1o6iQL5Jb4exEZE"
    "xWbM+hxVBpgMQxxpJI589wzMyU0HVPRoyjMeJwwnFBUES6n7cx7OHr6WxgUWKUdf5O/AghyPxvds1CI8oDVnoUZc"
    "ZtYu7eKBtJf5mIyFctP9woRL+M4OMAYtU7frdb2pN2s7grt7JklrsrVM7DRajrz7dce0HLOxd2GP+jgNheRlVu0V"
    "RNmOjx6PkceXDrNiMt/Y67lDrZLOsV5tVdvWreWWbum2VPWfDGstO5bntJcd33caDcf0aofqD3ddFdD+40xiJlCh"
    "bbZNty3PMnUpEaGePZlUlI45jMqDZIJ6lwWas027rpkNzbTWLdMxs8/GAwtgjSZhQPBtKtRjL+RDrYix5roXZmTY"
    "cmNomUpLQb/OwhMF3sl20nASaJgQyrm21ezbCQp+V3yo1KD61Rm1KOI+jWBR/QAQVMd8FsdCI1gnUvcqlCZvkyd8"
    "hD6E8zCbHQ5PpNPRqXEiI2k19rDA+o6k+l0e/ZDfTqf3Gb0fcMFGOt3CMnOoTuKBkaWWIcWOpdd1234bCj0hklNf"
    "flzLr690nSoUP7+8ds9EM0McplQzp4g1RawpYk8Re4osTZElZx5K3c+u3FvtqnPSyEzbynbu6DKTV7udK/AW5EmS"
    "ohIUGqY5gONQGtBBzEZoBop2Y/lmgHYZspwM0D6GZbduBjeuH+LuqqJqxhAzg6WRwSlhVHBjfwhwyoYBoXJWnEZi"
    "7TycRiehbPQoDkXvISqWc1Xpk8L19fVuFU4pC7ComPmNc6BK55dkAGFvhMplRR27b5snWcWM9WDO8OhQepoNggiL"
    "II60ML7PKqv+rVh0ZezJovatUrgWhBT9lIcZHniUYIZqXkz6lGXaydoYj2Rcb422Xx1Zj5ZM3fr/vP7d81JLl8NN"
    "POIL83ZlJUy5nHMtYFx0ZiYV88b0Za0UxZ7skiz3tXJ8gmmc9KiXhpQ9VepwJiO8UJgiWQa2dS1d3ZLJy2uzt+Kr"
    "W5Skgi7+eOSpsgzzL5mWRnIS6WFXRtRLJz5Tcn8oynNlTpoju6j4NN6krMuCmAVipP5ZhJm1NIqC6D66CKfl/4O1"
    "TIf1+HZWJVdky8ZBRBlHhXXZTdRcbdLX0XtwdDUKRIDD4CH1DohPQnG80AHBWTi2u+rLKfNQkXrcnjjswNoXIGso"
    "slPqlmnDpGVaesOZyDvPle0qCKgME0zNLSiLOft16qLTfw3SJ7yHZeQ72H2zq3OTTJ3hOYZBvDe7riudv5TdqnLQ"
    "Aa9RZ5wHr+b8Z82/MdtJZU5m2eBWYE9wPFGynztxI6Mp9zfkmTOt"
)
OFFICIAL_POD_TRIMMED: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-7-5d8f7c9b4-x00007",
        "namespace": "ns-7",
        "uid": "1f0c9a3e-7b2d-4c1e-9a8f-000000000007",
        "resourceVersion": "100007",
        "annotations": {
            "k8s.v1.cni.cncf.io/networks": "macvlan-conf",
            "k8s.v1.cni.cncf.io/network-status": json.dumps(
                [
                    {
                        "name": "cbr0",
                        "interface": "eth0",
                        "ips": ["10.244.7.7"],
                        "mac": "0a:58:0a:f4:01:05",
                        "default": True,
                        "dns": {},
                    },
                    {
                        "name": "default/macvlan-conf",
                        "interface": "net1",
                        "ips": ["192.168.1.205"],
                        "mac": "86:1d:96:ff:55:0d",
                        "dns": {},
                    },
                ],
                indent=4,
            ),
            "kubectl.kubernetes.io/restartedAt": "2024-05-01T10:00:00Z",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9090",
        },
    },
    "spec": {"nodeName": "node-7"},
}


def official_pod_bytes() -> bytes:
    """The ``k8s\\0``-wrapped protobuf Pod of ``OFFICIAL_POD`` (2,840 bytes)."""
    return zlib.decompress(base64.b64decode("".join(OFFICIAL_POD)))
