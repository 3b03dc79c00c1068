"""Pin a copy of the chart to a released image (release/release.sh).

    pin_chart.py CHART_DIR IMAGE_REPOSITORY INDEX_DIGEST VERSION [SOURCE_URL]

values.yaml's `image.repository` and `image.digest` become the pushed image and its index
digest (comments and layout kept), and Chart.yaml's `artifacthub.io/images` names the image
by tag and digest, as Artifact Hub lists it; with SOURCE_URL (https://HOST/OWNER/REPO),
`artifacthub.io/links` points at the source and the changelog at the tag vVERSION. Fails, naming the line, when the chart does not
have them where expected.
"""

import re
import sys


def fail(message):
    print(f"pin_chart.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    chart, repository, digest, version = sys.argv[1:5]
    source = sys.argv[5] if len(sys.argv) > 5 else ""
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        fail(f"{digest}: not a sha256 digest")

    values_path = f"{chart}/values.yaml"
    lines = open(values_path).read().split("\n")
    try:
        start = lines.index("image:")
    except ValueError:
        fail(f"{values_path}: no top-level `image:`")
    pinned = set()
    for number in range(start + 1, len(lines)):
        line = lines[number]
        if line and not line.startswith(" "):
            break
        for key, value in (("repository", repository), ("digest", f'"{digest}"')):
            if re.fullmatch(rf"  {key}: .*", line):
                lines[number] = f"  {key}: {value}"
                pinned.add(key)
    if pinned != {"repository", "digest"}:
        fail(f"{values_path}: `image:` lacks {sorted({'repository', 'digest'} - pinned)}")
    open(values_path, "w").write("\n".join(lines))

    chart_path = f"{chart}/Chart.yaml"
    text = open(chart_path).read()
    listed = f"image: wasm-ccm:{version}"
    if listed not in text:
        fail(f"{chart_path}: artifacthub.io/images does not list `{listed}`")
    text = text.replace(listed, f"image: {repository}:{version}@{digest}")
    if source:
        if not re.fullmatch(r"https://[^\s]+", source):
            fail(f"{source}: the source is an https:// URL")
        text = text.rstrip("\n") + (
            "\n  artifacthub.io/links: |\n"
            f"    - name: Source\n      url: {source}/tree/v{version}\n"
            f"    - name: Changelog\n      url: {source}/blob/v{version}/CHANGELOG.md\n"
        )
    open(chart_path, "w").write(text)


if __name__ == "__main__":
    main()
