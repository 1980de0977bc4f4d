// ESLint flat config: typescript-eslint's type-checked recommended rules on every .ts file of the
// project (types come from tsconfig.json through the project service). Formatting is prettier's
// job (`npm run format`), so no stylistic rules here.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: ['node_modules/', 'bench/results/', 'artifacts/', '.data/', 'temporal/'],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
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
      // `_`-prefixed names are deliberately unused (destructuring to drop a field, callback arity).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
    },
  },
  {
    files: ['**/*.mjs'],
    ...tseslint.configs.disableTypeChecked,
  },
);
