; Inno Setup script of ModelDeck's Windows installer (Inno Setup 6.3 or newer: x64compatible).
; Built by installers/windows/build.ps1 after PyInstaller has made build\pyinstaller\dist\ModelDeck\:
;   iscc /DAppVersion=0.1.0 installers\windows\modeldeck.iss
; Cannot be built on the Linux machines this project is developed on; the release workflow builds it on a hosted
; Windows runner (installers/release/github-release.yml).
#ifndef AppVersion
  #error Pass the version: iscc /DAppVersion=X.Y.Z modeldeck.iss
#endif
#define AppExe "modeldeck.exe"

[Setup]
AppId={{6C1F3C2E-7D0B-4E53-9E58-1D2B9B7A5E11}
AppName=ModelDeck
AppVersion={#AppVersion}
AppPublisher=ModelDeck developers
DefaultDirName={autopf}\ModelDeck
DefaultGroupName=ModelDeck
; Per-user install by default (no administrator rights), the machine-wide one on request.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename=ModelDeck-{#AppVersion}-windows-x86_64-setup
SetupIconFile=..\..\resources\modeldeck.ico
UninstallDisplayIcon={app}\{#AppExe}
Compression=lzma2
SolidCompression=yes
WizardStyle=modern

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "..\..\build\pyinstaller\dist\ModelDeck\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\ModelDeck"; Filename: "{app}\{#AppExe}"
Name: "{group}\{cm:UninstallProgram,ModelDeck}"; Filename: "{uninstallexe}"
Name: "{autodesktop}\ModelDeck"; Filename: "{app}\{#AppExe}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExe}"; Description: "{cm:LaunchProgram,ModelDeck}"; Flags: nowait postinstall skipifsilent
