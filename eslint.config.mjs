// ESLint flat config: typescript-eslint's type-checked recommended rules on every .ts file of the
// project (types come from tsconfig.json through the project service). Formatting is prettier's
// job (`npm run format`), so no stylistic rules here.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

export default defineConfig(
  {
    // bench/engines/ is a package of its own (DBOS, Restate), typechecked by its own tsconfig.json.
    ignores: ['node_modules/', 'bench/results/', 'bench/engines/', 'artifacts/', '.data/', 'temporal/'],
  },
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        // The config files are not in tsconfig.json: they get a default project.
        projectService: { allowDefaultProject: ['*.mjs', '*.mts'] },
        tsconfigRootDir: import.meta.dirname,
      },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // Promises: these two are the point of linting this code base; spelled out so they stay on.
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      // Activities are object-literal methods that never use `this`; Temporal and the tests call them detached (all 89 findings).
      '@typescript-eslint/unbound-method': 'off',
      // An async function without await is how a stub or a hook implements a Promise-returning type here.
      '@typescript-eslint/require-await': 'off',
      // Dropping a field with a rest destructuring (`const { orderIds: _ids, ...printable }`) is intended.
      '@typescript-eslint/no-unused-vars': ['error', { ignoreRestSiblings: true }],
      // `let x!: T` read by a closure made before the one assignment cannot be a const.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      // vitest types its asymmetric matchers (expect.any, expect.stringMatching, …) as any; other any values in tests are typed.
      '@typescript-eslint/no-unsafe-assignment': 'off',
    },
  },
  {
    files: ['workflows/**/*.ts'],
    rules: {
      // Waits are durable timers. The workflow clock (the recorded time of the workflow task, the same
      // on every replay) is read only where a line says why: the deadline and a step's own bound
      // (docs/decisions.md, "The deadline is read from the workflow clock").
      'no-restricted-properties': [
        'error',
        {
          object: 'Date',
          property: 'now',
          message: 'workflow code waits on durable timers; read the workflow clock only where a line says why',
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "NewExpression[callee.name='Date']",
          message: 'workflow code waits on durable timers; read the workflow clock only where a line says why',
        },
      ],
    },
  },
  {
    // The saga's rooms wait only through SagaRun (workflows/saga-run.ts), which lets the Web UI's search
    // attributes catch up with the status before each wait: a wait around it would leave them behind.
    files: [
      'workflows/order-saga.ts',
      'workflows/charge-protocol.ts',
      'workflows/recovery.ts',
      'workflows/saga-inbox.ts',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: '@temporalio/workflow',
              importNames: ['sleep', 'condition', 'upsertSearchAttributes'],
              message: 'wait through SagaRun (saga.sleep, saga.condition): it updates the search attributes first',
            },
            {
              name: './saga-activities',
              importNames: ['act', 'actLocalFirst'],
              message:
                'call activities through SagaRun (saga.act, saga.actLocalFirst): it updates the search attributes first',
            },
          ],
        },
      ],
    },
  },
  {
    files: ['**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    // bin/client: plain CommonJS that Node runs as it is (it loads the command line's build).
    files: ['bin/client'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: {
      sourceType: 'commonjs',
      globals: { require: 'readonly', process: 'readonly', __dirname: 'readonly' },
    },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
