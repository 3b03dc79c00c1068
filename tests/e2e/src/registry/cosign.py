# An independent implementation of cosign's keyed image signatures (cosign's
# specs/SIGNATURE_SPEC.md), for the signature tests: its own key generation, payload, signature
# (PyCA `cryptography`, pinned in tests/install-test-tools.sh) and registry requests (the
# distribution API over plain HTTP with urllib), sharing no code with wasm-ccm.
#
# argv[1] is a JSON object: {"command": "sign" | "verify", "registry": "127.0.0.1:PORT",
# "repository": "acme/simcloud", "digest": "sha256:...", "key": PATH}. `sign` makes a P-256
# key, writes its public key (PEM SubjectPublicKeyInfo) to `key`, signs `digest` and pushes
# the signature manifest under the tag sha256-HEX.sig; `verify` reads that manifest and
# checks every layer against the layout and the public key at `key`. Prints a JSON result.
import base64
import hashlib
import json
import sys
import urllib.error
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
ANNOTATION = "dev.cosignproject.cosign/signature"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
IMAGE_CONFIG = "application/vnd.oci.image.config.v1+json"

args = json.loads(sys.argv[1])
base = "http://%s/v2/%s" % (args["registry"], args["repository"])
tag = args["digest"].replace(":", "-", 1) + ".sig"


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def request(method, url, data=None, headers=None):
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(req) as response:
        return response.status, dict(response.headers), response.read()


def push_blob(data):
    digest = sha256(data)
    _, headers, _ = request("POST", base + "/blobs/uploads/")
    location = headers["Location"]
    if location.startswith("/"):
        location = "http://%s%s" % (args["registry"], location)
    separator = "&" if "?" in location else "?"
    request(
        "PUT",
        location + separator + "digest=" + digest,
        data,
        {"Content-Type": "application/octet-stream"},
    )
    return digest


def get_manifest():
    try:
        _, headers, body = request(
            "GET", base + "/manifests/" + tag, headers={"Accept": OCI_MANIFEST}
        )
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None, None
        raise
    return headers.get("Content-Type"), body


def sign():
    key = ec.generate_private_key(ec.SECP256R1())
    with open(args["key"], "wb") as out:
        out.write(
            key.public_key().public_bytes(
                serialization.Encoding.PEM,
                serialization.PublicFormat.SubjectPublicKeyInfo,
            )
        )
    # Keys in another order and spacing than wasm-ccm writes: the signature covers the
    # bytes, whatever they are.
    payload = json.dumps(
        {
            "optional": {"creator": "cosign.py"},
            "critical": {
                "type": "cosign container image signature",
                "image": {"docker-manifest-digest": args["digest"]},
                "identity": {
                    "docker-reference": "%s/%s" % (args["registry"], args["repository"])
                },
            },
        },
        indent=1,
    ).encode()
    signature = key.sign(payload, ec.ECDSA(hashes.SHA256()))
    _, existing = get_manifest()
    layers = json.loads(existing)["layers"] if existing else []
    layers.append(
        {
            "mediaType": SIMPLE_SIGNING,
            "size": len(payload),
            "digest": push_blob(payload),
            "annotations": {ANNOTATION: base64.b64encode(signature).decode()},
        }
    )
    config = json.dumps(
        {
            "architecture": "",
            "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"} for _ in layers],
            "os": "",
            "rootfs": {"type": "layers", "diff_ids": [l["digest"] for l in layers]},
            "config": {},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": IMAGE_CONFIG,
                "size": len(config),
                "digest": push_blob(config),
            },
            "layers": layers,
        }
    ).encode()
    request(
        "PUT", base + "/manifests/" + tag, manifest, {"Content-Type": OCI_MANIFEST}
    )
    return {"tag": tag, "signatures": len(layers)}


def verify():
    with open(args["key"], "rb") as f:
        key = serialization.load_pem_public_key(f.read())
    assert isinstance(key.curve, ec.SECP256R1), key.curve
    content_type, body = get_manifest()
    assert body is not None, "no signature manifest under " + tag
    manifest = json.loads(body)
    assert manifest["schemaVersion"] == 2, manifest
    assert manifest.get("mediaType", content_type) == OCI_MANIFEST, manifest
    assert manifest["config"]["mediaType"] == IMAGE_CONFIG, manifest
    _, _, config = request("GET", base + "/blobs/" + manifest["config"]["digest"])
    config = json.loads(config)
    assert config["rootfs"]["diff_ids"] == [l["digest"] for l in manifest["layers"]], config
    verified = 0
    for layer in manifest["layers"]:
        assert layer["mediaType"] == SIMPLE_SIGNING, layer
        _, _, payload = request("GET", base + "/blobs/" + layer["digest"])
        assert sha256(payload) == layer["digest"] and len(payload) == layer["size"], layer
        claims = json.loads(payload)["critical"]
        assert claims["type"] == "cosign container image signature", claims
        assert claims["image"]["docker-manifest-digest"] == args["digest"], claims
        assert claims["identity"]["docker-reference"] == "%s/%s" % (
            args["registry"],
            args["repository"],
        ), claims
        signature = base64.b64decode(layer["annotations"][ANNOTATION])
        try:
            key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
            verified += 1
        except InvalidSignature:
            pass
    return {"layers": len(manifest["layers"]), "verified": verified}


print(json.dumps({"sign": sign, "verify": verify}[args["command"]]()))
