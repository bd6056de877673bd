// ESLint: JavaScript's and typescript-eslint's recommended rules plus a few that catch real mistakes.
// The rules need no type information, so the lint stays fast; layout is Prettier's job (prettier.config.js).
import js from "@eslint/js";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  // src/report/client-script.ts is generated from src/report/client/main.ts, which is linted.
  {
    ignores: [
      "dist/",
      "native/build/",
      "models/",
      "outputs/",
      "hsm-demo/",
      ".tsc-check/",
      ".bench/",
      "src/report/client-script.ts",
    ],
  },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: globals.node },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      eqeqeq: ["error", "always", { null: "ignore" }],
      "default-case-last": "error",
      "no-self-compare": "error",
      "no-template-curly-in-string": "error",
      "no-unreachable-loop": "error",
      "no-useless-rename": "error",
      "object-shorthand": "error",
      // Destructuring that mixes reassigned and fixed names stays one `let`.
      "prefer-const": ["error", { destructuring: "all" }],
      // A leading underscore marks a name kept on purpose: a destructured field dropped from a rest, a callback slot.
      "@typescript-eslint/no-unused-vars": [
        "error",
        {
          argsIgnorePattern: "^_",
          varsIgnorePattern: "^_",
          caughtErrorsIgnorePattern: "^_",
          destructuredArrayIgnorePattern: "^_",
          ignoreRestSiblings: true,
        },
      ],
      // `import type` keeps type-only modules out of the emitted JavaScript; `import("m").T` in a type is allowed
      // because onnx-proto's namespaced types are reached that way.
      "@typescript-eslint/consistent-type-imports": ["error", { disallowTypeAnnotations: false }],
    },
  },
);
