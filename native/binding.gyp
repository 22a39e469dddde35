{
  # Built by `npm run build:native` (node-gyp rebuild --directory native).
  # Output: native/build/Release/strata_native.node, loaded by lib/systemd.ts.
  "targets": [
    {
      "target_name": "strata_native",
      "sources": ["src/strata_native.c"],
      "cflags_c": ["-std=gnu11", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
      "defines": ["NAPI_VERSION=8", "_GNU_SOURCE"]
    }
  ]
}
