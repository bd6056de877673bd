{
  "targets": [
    {
      "target_name": "hsm_native",
      "sources": ["hsm_native.cc", "float16.cc", "rank.cc", "bootstrap.cc", "products.cc", "rows.cc", "sha256.cc", "hash_files.cc", "head.cc", "json_scan.cc", "order.cc"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions"],
      "cflags_cc": ["-O3", "-std=c++17", "-fno-math-errno", "-ffp-contract=off"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
