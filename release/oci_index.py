"""One OCI image layout holding an image index over per-platform images (release/release.sh).

    oci_index.py --layout OUT --tag TAG [--annotation KEY=VALUE ...] PLATFORM=LAYOUT ...

Each LAYOUT is what image/build.sh wrote (one image tagged TAG); their blobs are copied into
OUT, and an index naming each image with its platform is written there, tagged TAG, with
the annotations given. The index is serialised the same way every time (keys in a fixed
order, no spaces), so the same images give the same index digest, which is printed.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def fail(message):
    print(f"oci_index.py: {message}", file=sys.stderr)
    sys.exit(1)


def blob_path(layout, digest):
    algorithm, hex_digest = digest.split(":", 1)
    return os.path.join(layout, "blobs", algorithm, hex_digest)


def read_json(path):
    with open(path, "rb") as file:
        return json.load(file)


def put_blob(layout, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = blob_path(layout, digest)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as file:
        file.write(data)
    return digest


def canonical(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def image_of(layout, tag, platform):
    """The descriptor of the image tagged `tag` in `layout`, checked against `platform`."""
    tagged = [
        descriptor
        for descriptor in read_json(os.path.join(layout, "index.json"))["manifests"]
        if descriptor.get("annotations", {}).get(REF_NAME) == tag
    ]
    if len(tagged) != 1:
        fail(f"{layout}: {len(tagged)} images tagged {tag}; expected one")
    descriptor = tagged[0]
    manifest = read_json(blob_path(layout, descriptor["digest"]))
    config = read_json(blob_path(layout, manifest["config"]["digest"]))
    os_name, architecture = platform.split("/", 1)
    if (config.get("os"), config.get("architecture")) != (os_name, architecture):
        fail(
            f"{layout}: the image is {config.get('os')}/{config.get('architecture')}, not {platform}"
        )
    blobs = [descriptor["digest"], manifest["config"]["digest"]]
    blobs += [layer["digest"] for layer in manifest["layers"]]
    return descriptor, blobs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--annotation", action="append", default=[])
    parser.add_argument("images", nargs="+", metavar="PLATFORM=LAYOUT")
    args = parser.parse_args()

    if os.path.exists(args.layout):
        shutil.rmtree(args.layout)
    os.makedirs(os.path.join(args.layout, "blobs", "sha256"))
    manifests = []
    for image in args.images:
        platform, _, layout = image.partition("=")
        if not layout or platform.count("/") != 1:
            fail(f"{image}: PLATFORM=LAYOUT, e.g. linux/arm64=target/dist/0.2.0/image-arm64")
        descriptor, blobs = image_of(layout, args.tag, platform)
        for digest in blobs:
            shutil.copyfile(blob_path(layout, digest), blob_path(args.layout, digest))
        os_name, architecture = platform.split("/", 1)
        manifests.append(
            {
                "mediaType": MANIFEST,
                "digest": descriptor["digest"],
                "size": descriptor["size"],
                "platform": {"architecture": architecture, "os": os_name},
            }
        )
    annotations = {}
    for annotation in args.annotation:
        key, _, value = annotation.partition("=")
        annotations[key] = value
    index = canonical(
        {
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": manifests,
            "annotations": dict(sorted(annotations.items())),
        }
    )
    digest = put_blob(args.layout, index)
    with open(os.path.join(args.layout, "oci-layout"), "wb") as file:
        file.write(canonical({"imageLayoutVersion": "1.0.0"}))
    top = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": INDEX,
                "digest": digest,
                "size": len(index),
                "annotations": {REF_NAME: args.tag},
            }
        ],
    }
    with open(os.path.join(args.layout, "index.json"), "wb") as file:
        file.write(canonical(top))
    print(digest)


if __name__ == "__main__":
    main()
